// The bench's query sample library: prompts as token ids, loaded from the MLPerf parquet files, JSONL, or made
// up by the synthetic generator. Every dataset records a SHA-256 that identifies its content.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moeserve::bench {

struct DatasetSample {
  std::vector<int32_t> prompt;
  // Tokens to generate exactly (synthetic datasets); 0: the model decides, up to the benchmark's max tokens.
  int output_tokens = 0;
  std::string source;        // the row's `dataset` column where there is one (aime25, gpqa_diamond, ...)
  std::string ground_truth;  // the accuracy set's `ground_truth` column, kept for the record
};

struct Dataset {
  std::string format;  // "parquet", "jsonl", "synthetic", "pubmed"
  std::string path;    // the file read; for synthetic datasets the generator's spec
  std::string sha256;  // of the file's bytes; for synthetic datasets of the generated token ids
  std::vector<DatasetSample> samples;

  // Counts and prompt/output length statistics, for the report.
  nlohmann::json describe() const;
};

// JSONL datasets (token ids, PubMed articles) are read line by line within these bounds: a line holds one
// sample (a 100,000-token prompt is ~700 KB of JSON), a file at most kMaxJsonlBytes.
inline constexpr uint64_t kMaxJsonlLineBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxJsonlBytes = uint64_t{4} << 30;

// A JSONL file: one object per line with the prompt as token ids in "input_tokens", "tok_input",
// "prompt_token_ids" or "token_ids", optionally "output_tokens" (exact output length), "dataset" and
// "ground_truth". Lines with text prompts are refused: tokenize them first (the bench sends token ids).
Dataset load_jsonl_dataset(const std::string& path);

// The MLPerf parquet files: perf_eval_ref.parquet and acc_eval_ref.parquet, with the prompt as a list of
// integers in "input_tokens" (v4 files) or "tok_input" (earlier ones), and "dataset" / "ground_truth" when present.
Dataset load_parquet_dataset(const std::string& path);

// Synthetic prompts and output lengths. A length spec is "N" (always N), "uniform:LO:HI" or "normal:MEAN:STD"
// (rounded, clipped to [1, 2 * MEAN]). Prompt tokens are drawn uniformly from [0, vocab_size).
struct SyntheticSpec {
  uint64_t samples = 100;
  std::string input_length = "5000";   // the GPT-OSS performance set's mean prompt length
  std::string output_length = "1250";  // ... and mean output length
  int32_t vocab_size = 200000;
  uint64_t seed = 0;
};
Dataset make_synthetic_dataset(const SyntheticSpec& spec);

// Picks the loader by the file name: .parquet, .jsonl; "synthetic" makes one from `synthetic`. (PubMed articles,
// which need a tokenizer and Harmony, load through pubmed.h.)
Dataset load_dataset(const std::string& path_or_synthetic, const SyntheticSpec& synthetic);

}  // namespace moeserve::bench
