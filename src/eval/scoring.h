// Scoring model outputs against ground truths, per dataset, and the numbers MLPerf and users read off them.
//
// One sample is scored by its dataset's scorer (datasets.h) under MLPerf's rules for the model (answer_extraction.h):
//   aime: parse_aime_answer / aime_correct          gpqa: multiple choice A-D
//   mmlu_pro: multiple choice A-J                    math500: parse_boxed / math500_correct
//   livecodebench: extract_code, then every test of the problem named by the ground truth (its question_id)
//                  passes in the sandbox (lcb_runner.h); LiveCodeBench samples run in parallel.
// A sample with nothing extracted is wrong; a LiveCodeBench question id that is not among the problems is wrong
// ("not found in benchmark"), as in the reference.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/answer_extraction.h"
#include "eval/datasets.h"
#include "eval/lcb_runner.h"

namespace moeserve::eval {

struct SampleToScore {
  std::string dataset;  // picks the scorer (scorer_for_dataset)
  std::string ground_truth;
  std::string text;  // the model's output; for GPT-OSS the Harmony text with special tokens kept
};

struct ScoredSample {
  ScorerKind kind = ScorerKind::aime;
  bool correct = false;
  std::optional<std::string> extracted;  // the parsed answer, or the extracted code
  std::string detail;                     // "Correct", or why not
};

class SampleScorer {
 public:
  // problems: LiveCodeBench problems by question_id (may be empty when no LiveCodeBench sample is scored);
  // lcb_runner: needed only for LiveCodeBench samples.
  SampleScorer(Rules rules, std::map<std::string, std::shared_ptr<const LcbProblem>> problems,
               const LcbRunner* lcb_runner);

  // An Error for a dataset name no scorer matches (the reference raises too).
  std::vector<ScoredSample> score(const std::vector<SampleToScore>& samples) const;

 private:
  Rules rules_;
  std::map<std::string, std::shared_ptr<const LcbProblem>> problems_;
  const LcbRunner* lcb_runner_;
};

// ---- MLPerf's numbers ------------------------------------------------------------------------------------------

struct DatasetTally {
  std::string dataset;
  int64_t correct = 0;
  int64_t total = 0;
  int repeats = 1;
};

// eval_mlperf_accuracy.py DATASET_REPEATS: aime25 8, gpqa_diamond 5, livecodebench_v6 3, any other name 1.
int mlperf_dataset_repeats(const std::string& dataset);
// GPT-OSS: sum(correct / repeats) / sum(total / repeats) * 100 over the datasets; 0 with no samples.
double mlperf_final_score(const std::vector<DatasetTally>& tallies);

// ---- Pass@1 with a confidence interval ---------------------------------------------------------------------

// Pass@1 over questions answered k times each: the mean over questions of (correct answers / k). The 95%
// confidence interval is the normal approximation over questions: mean +- 1.96 * s / sqrt(n), where s is the
// sample standard deviation of the per-question rates (n - 1 in the denominator), clipped to [0, 1]. It
// reflects both the sampling of questions and of answers; with one question the interval is [mean, mean].
struct PassAtOne {
  int64_t questions = 0;
  int64_t samples = 0;
  double pass_at_1 = 0;
  double ci_low = 0;
  double ci_high = 0;
};
PassAtOne pass_at_one(const std::vector<std::vector<bool>>& correct_by_question);

}  // namespace moeserve::eval
