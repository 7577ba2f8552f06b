// A realistic small performance set: PubMed articles (the raw armancohan/long-summarization format, one JSON
// object per line with "article_text" and "abstract_text" as lists of sentences) rendered in Harmony as MLPerf's
// pre-release harmonize_inputs.py rendered its summarization rows (mlcommons/inference 02206f71^,
// create_arxiv_summarization_prompt, also used for pubmed_summarization): the default system message with the
// reasoning effort, conversation start date 2025-09-30 and the analysis/commentary/final channels; a developer
// message with the summarization instructions; the article as the user message; then "<|start|>assistant".
// The script's user query column is not known; the article's sentences joined by spaces stand in for it.
// The MLPerf performance set uses reasoning effort low.
#pragma once

#include <string>

#include "bench/dataset.h"
#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::bench {

// harmonize_inputs.py's instructions for arXiv and PubMed summarization.
extern const char* const kSummarizationInstructions;

Dataset load_pubmed_dataset(const std::string& path, const Tokenizer& tokenizer,
                            harmony::ReasoningEffort effort = harmony::ReasoningEffort::low);

}  // namespace moeserve::bench
