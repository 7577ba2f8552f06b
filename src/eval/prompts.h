// The Harmony conversation a question becomes, as MLPerf rendered its GPT-OSS accuracy set (the pre-release
// language/gpt-oss-120b/preprocess/harmonize_inputs.py, mlcommons/inference 02206f71^; whether the released
// parquet used exactly these templates is unconfirmed):
//   system:    Harmony's default system message with the reasoning effort, conversation start date 2025-09-30
//              and the channels analysis, commentary, final (required);
//   developer: the dataset's instructions (below), each with MLPerf's "answer quickly" paragraph;
//   user:      the question (datasets.h lays out choices and LiveCodeBench statements).
// The script's few-shot examples (MATH-500, MMLU, GPQA) are not reproduced: prompts here are zero-shot.
#pragma once

#include <string>

#include "eval/datasets.h"
#include "harmony/message.h"

namespace moeserve::eval {

// The developer instructions for a scorer's datasets.
std::string dataset_instructions(ScorerKind kind);

harmony::Conversation question_conversation(const EvalQuestion& question, harmony::ReasoningEffort effort);

}  // namespace moeserve::eval
