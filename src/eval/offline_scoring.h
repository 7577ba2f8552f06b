// Scoring outputs that already exist, as MLPerf's accuracy scripts score an mlperf_log_accuracy.json:
//   gpt_oss (language/gpt-oss-120b/eval_mlperf_accuracy.py): every log record is scored (repeats of a qsl_idx
//     included), its tokens decoded with special tokens kept; records whose qsl_idx is outside the reference are
//     skipped with a warning; per dataset (lower-cased name) correct / total; the final score is
//     sum(correct / repeats) / sum(total / repeats) * 100, printed as 'exact_match': X.XXX.
//   deepseek_r1 (language/deepseek-r1/eval_accuracy.py process_mlperf_log_accuracy): a qsl_idx seen before is
//     skipped; exact_match is the mean accuracy over the samples (0 or 100 each) and tokens_per_sample the
//     mean number of output tokens, printed as {'exact_match': X, 'tokens_per_sample': Y, 'num-samples': N}.
// The reference gives each qsl_idx its dataset and ground truth (the parquet's `dataset` and `ground_truth`
// columns; for LiveCodeBench the ground truth is the question_id).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/accuracy_log.h"
#include "eval/scoring.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::eval {

struct ReferenceRow {
  std::string dataset;
  std::string ground_truth;
};

// The MLPerf accuracy parquet (acc_eval_ref.parquet, acc_eval_compliance_gpqa.parquet: string columns
// "dataset" and "ground_truth", read with bench/parquet), or JSON lines with "dataset" and "ground_truth", one
// per qsl_idx in order.
std::vector<ReferenceRow> load_reference(const std::string& path);

struct ModelOutput {
  int64_t seq_id = 0;
  int64_t qsl_idx = 0;
  std::string text;
  int64_t token_count = 0;
};

using Detokenizer = std::function<std::string(std::span<const int32_t>)>;
// GPT-OSS's tokenizer from a tiktoken rank file, a tokenizer.json or a model directory; empty: the o200k_base
// ranks scripts/setup.sh installs (Tokenizer::o200k_harmony()).
std::shared_ptr<const Tokenizer> open_gpt_oss_tokenizer(const std::string& tokenizer_path);
// Its decoding as eval_mlperf_accuracy.py decodes (skip_special_tokens=False: special tokens by name; ill-formed
// UTF-8 replaced).
Detokenizer gpt_oss_detokenizer(const std::string& tokenizer_path);
// DeepSeek-R1's decoding of a log (language/deepseek-r1/eval_accuracy.py: batch_decode(skip_special_tokens=True))
// with its tokenizer.json or a model directory holding it, which must be given.
Detokenizer deepseek_r1_detokenizer(const std::string& tokenizer_path);

// The log's records as outputs, by the rules above (duplicates and out-of-range qsl_idx); what was skipped is
// added to warnings.
std::vector<ModelOutput> outputs_from_log(const std::vector<AccuracyLogEntry>& entries, size_t reference_rows,
                                          const Detokenizer& detokenize, Rules rules,
                                          std::vector<std::string>& warnings);
// JSON lines {qsl_idx, text, [seq_id], [token_count]}: outputs from elsewhere (another harness, a text log).
std::vector<ModelOutput> load_outputs(const std::string& path);

struct OfflineResult {
  Rules rules = Rules::gpt_oss;
  std::vector<ModelOutput> outputs;
  std::vector<ReferenceRow> references;  // the reference row of each output
  std::vector<ScoredSample> scores;      // of each output
  std::vector<DatasetTally> tallies;     // by dataset name, sorted
  double exact_match = 0;
  double tokens_per_sample = 0;
  std::vector<std::string> warnings;
};

OfflineResult score_outputs(std::vector<ModelOutput> outputs, const std::vector<ReferenceRow>& reference,
                            const SampleScorer& scorer, Rules rules);

// What the reference script prints, with the line the submission checker reads, then the checker's accuracy
// target: gpt-oss-120b exact_match >= 99% of 83.13; deepseek-r1 exact_match >= 99% of 81.3582 and tokens per
// sample within 10% of 3886.2274.
std::string offline_report_text(const OfflineResult& result);
// Summary and one record per sample (seq_id, qsl_idx, dataset, is_correct, extracted_answer, ground_truth,
// evaluation_details, token_count), as eval_mlperf_accuracy.py --output-file writes.
nlohmann::json offline_result_json(const OfflineResult& result);

}  // namespace moeserve::eval
