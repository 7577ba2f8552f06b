// End-to-end evaluation: every question rendered with Harmony and its dataset's instructions (prompts.h),
// answered `repeats` times by a completion source, scored (scoring.h), and summarised per dataset as Pass@1
// with its confidence interval, plus MLPerf's repeats-weighted exact_match over all of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/completion_source.h"
#include "eval/datasets.h"
#include "eval/scoring.h"

namespace moeserve::eval {

struct EvalRunOptions {
  int repeats = 1;
  harmony::ReasoningEffort effort = harmony::ReasoningEffort::high;  // MLPerf's accuracy runs
  SamplingParams sampling;  // temperature 1, top_p 1 (MLPerf's generation_config.json); seed + sample index
  int max_tokens = 32768;
  Rules rules = Rules::gpt_oss;
  bench::WorkProgress* progress = nullptr;  // counts generations as they finish (may be null)
};

struct EvalSample {
  const EvalQuestion* question = nullptr;
  int repeat = 0;
  Completion completion;
  ScoredSample score;
};

struct DatasetSummary {
  std::string dataset;
  PassAtOne pass;
};

struct EvalRunResult {
  std::vector<EvalSample> samples;
  std::vector<DatasetSummary> datasets;  // in the order the datasets first appear
  double exact_match = 0;                // mlperf_final_score over the datasets, repeats from their names
  size_t failed_samples = 0;             // generations that failed (scored as wrong): the run is INVALID
};

// lcb_runner may be null when no question is LiveCodeBench.
EvalRunResult run_evaluation(const std::vector<EvalQuestion>& questions, CompletionSource& source,
                             const LcbRunner* lcb_runner, const EvalRunOptions& options);

// The per-dataset table: questions, samples, Pass@1 and its 95% interval, in percent; then, when generations
// failed, eval_failures_text.
std::string eval_table_text(const EvalRunResult& result);
// "INVALID: 3 of 24 samples failed to generate; the first: <its error>" ("" when none failed).
std::string eval_failures_text(const EvalRunResult& result);
// One JSON object per sample: dataset, question_id, repeat, ground_truth, extracted_answer, is_correct,
// evaluation_details, tokens, stopped, text.
nlohmann::json eval_sample_json(const EvalSample& sample);

}  // namespace moeserve::eval
