#include "eval/scoring.h"

#include <fmt/format.h>

#include <cmath>

#include "eval/code_extraction.h"
#include "eval/math_equivalence.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

ScoredSample verdict(ScorerKind kind, bool correct, std::optional<std::string> extracted,
                     const std::string& ground_truth) {
  ScoredSample s;
  s.kind = kind;
  s.correct = correct;
  s.extracted = std::move(extracted);
  if (!s.extracted) {
    s.detail = "No answer extracted from model output";
  } else {
    s.detail = correct ? "Correct" : fmt::format("Incorrect (extracted: {}, ground_truth: {})", *s.extracted, ground_truth);
  }
  return s;
}

ScoredSample score_answer(ScorerKind kind, Rules rules, const SampleToScore& sample) {
  switch (kind) {
    case ScorerKind::aime: {
      const std::optional<int> parsed = parse_aime_answer(sample.text);
      return verdict(kind, aime_correct(parsed, sample.ground_truth),
                     parsed ? std::optional(std::to_string(*parsed)) : std::nullopt, sample.ground_truth);
    }
    case ScorerKind::gpqa:
    case ScorerKind::mmlu_pro: {
      const char last = kind == ScorerKind::gpqa ? 'D' : 'J';
      const std::optional<char> parsed = parse_multiple_choice(sample.text, last, rules);
      return verdict(kind, multiple_choice_correct(parsed, sample.ground_truth, last),
                     parsed ? std::optional(std::string(1, *parsed)) : std::nullopt, sample.ground_truth);
    }
    case ScorerKind::math500: {
      std::optional<std::string> parsed = parse_boxed(sample.text);
      const bool correct = math500_correct(parsed, sample.ground_truth);
      return verdict(kind, correct, std::move(parsed), sample.ground_truth);
    }
    case ScorerKind::livecodebench: break;
  }
  fail("score_answer: LiveCodeBench samples are run, not parsed");
}

}  // namespace

SampleScorer::SampleScorer(Rules rules, std::map<std::string, std::shared_ptr<const LcbProblem>> problems,
                           const LcbRunner* lcb_runner)
    : rules_(rules), problems_(std::move(problems)), lcb_runner_(lcb_runner) {}

std::vector<ScoredSample> SampleScorer::score(const std::vector<SampleToScore>& samples) const {
  std::vector<ScoredSample> scored(samples.size());
  std::vector<LcbJob> jobs;
  std::vector<size_t> job_sample;
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleToScore& sample = samples[i];
    const std::optional<ScorerKind> kind = scorer_for_dataset(sample.dataset);
    MOESERVE_CHECK(kind.has_value(), "No evaluator found for dataset: {}", sample.dataset);
    if (*kind != ScorerKind::livecodebench) {
      scored[i] = score_answer(*kind, rules_, sample);
      continue;
    }
    ScoredSample& s = scored[i];
    s.kind = *kind;
    s.extracted = extract_code(sample.text, rules_);
    auto problem = problems_.find(sample.ground_truth);
    if (!s.extracted) {
      s.detail = "No code extracted from model output";
    } else if (s.extracted->empty()) {
      s.detail = "No code or question_id provided";  // an empty block: evaluate_livecodebench_detailed refuses it
    } else if (problem == problems_.end()) {
      s.detail = fmt::format("Question ID '{}' not found in benchmark", sample.ground_truth);
    } else {
      MOESERVE_CHECK(lcb_runner_ != nullptr, "LiveCodeBench samples need a runner");
      jobs.push_back({problem->second.get(), *s.extracted});
      job_sample.push_back(i);
    }
  }
  if (!jobs.empty()) {
    const std::vector<LcbVerdict> verdicts = lcb_runner_->run_all(jobs);
    for (size_t j = 0; j < jobs.size(); ++j) {
      ScoredSample& s = scored[job_sample[j]];
      s.correct = verdicts[j].passed;
      s.detail = verdicts[j].passed ? fmt::format("Passed {}/{} test cases", verdicts[j].tests_passed,
                                                  verdicts[j].tests_total)
                                    : verdicts[j].detail;
    }
  }
  return scored;
}

int mlperf_dataset_repeats(const std::string& dataset) {
  if (dataset == "aime25") return 8;
  if (dataset == "gpqa_diamond") return 5;
  if (dataset == "livecodebench_v6") return 3;
  return 1;
}

double mlperf_final_score(const std::vector<DatasetTally>& tallies) {
  double score = 0;
  double max_score = 0;
  for (const DatasetTally& t : tallies) {
    score += static_cast<double>(t.correct) / t.repeats;
    max_score += static_cast<double>(t.total) / t.repeats;
  }
  return max_score > 0 ? score / max_score * 100 : 0.0;
}

PassAtOne pass_at_one(const std::vector<std::vector<bool>>& correct_by_question) {
  PassAtOne p;
  std::vector<double> rates;
  for (const std::vector<bool>& answers : correct_by_question) {
    if (answers.empty()) continue;
    const auto right = std::count(answers.begin(), answers.end(), true);
    rates.push_back(static_cast<double>(right) / static_cast<double>(answers.size()));
    p.samples += static_cast<int64_t>(answers.size());
  }
  p.questions = static_cast<int64_t>(rates.size());
  if (rates.empty()) return p;
  double sum = 0;
  for (double r : rates) sum += r;
  p.pass_at_1 = sum / static_cast<double>(rates.size());
  double half_width = 0;
  if (rates.size() > 1) {
    double squares = 0;
    for (double r : rates) squares += (r - p.pass_at_1) * (r - p.pass_at_1);
    const double sd = std::sqrt(squares / static_cast<double>(rates.size() - 1));
    half_width = 1.96 * sd / std::sqrt(static_cast<double>(rates.size()));
  }
  p.ci_low = std::max(0.0, p.pass_at_1 - half_width);
  p.ci_high = std::min(1.0, p.pass_at_1 + half_width);
  return p;
}

}  // namespace moeserve::eval
