#include "eval/eval_run.h"

#include <fmt/format.h>

#include <map>

#include "eval/prompts.h"

namespace moeserve::eval {

EvalRunResult run_evaluation(const std::vector<EvalQuestion>& questions, CompletionSource& source,
                             const LcbRunner* lcb_runner, const EvalRunOptions& options) {
  EvalRunResult result;
  std::vector<CompletionRequest> requests;
  std::map<std::string, std::shared_ptr<const LcbProblem>> problems;
  for (const EvalQuestion& q : questions) {
    if (q.problem) problems[q.problem->question_id] = q.problem;
    for (int r = 0; r < options.repeats; ++r) {
      CompletionRequest request;
      request.conversation = question_conversation(q, options.effort);
      request.sampling = options.sampling;
      request.sampling.seed = options.sampling.seed + requests.size();  // a different draw for every sample
      request.max_tokens = options.max_tokens;
      requests.push_back(std::move(request));
      result.samples.push_back({&q, r, {}, {}});
    }
  }
  const std::vector<Completion> completions = source.complete(requests, options.progress);
  std::vector<SampleToScore> to_score;
  for (size_t i = 0; i < result.samples.size(); ++i) {
    result.samples[i].completion = completions[i];
    const EvalQuestion& q = *result.samples[i].question;
    to_score.push_back({q.dataset, q.ground_truth, completions[i].text});
  }
  const SampleScorer scorer(options.rules, std::move(problems), lcb_runner);
  const std::vector<ScoredSample> scores = scorer.score(to_score);

  // Per dataset, per question: the correctness of each repeat.
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, std::vector<bool>>> by_dataset;
  std::map<std::string, DatasetTally> tallies;
  for (size_t i = 0; i < result.samples.size(); ++i) {
    EvalSample& s = result.samples[i];
    s.score = scores[i];
    if (!s.completion.error.empty()) {
      s.score.detail = "generation failed: " + s.completion.error;
      ++result.failed_samples;
    }
    const std::string& dataset = s.question->dataset;
    if (!by_dataset.contains(dataset)) order.push_back(dataset);
    by_dataset[dataset][s.question->id].push_back(s.score.correct);
    DatasetTally& t = tallies[dataset];
    t.dataset = dataset;
    t.repeats = mlperf_dataset_repeats(dataset);
    ++t.total;
    t.correct += s.score.correct;
  }
  std::vector<DatasetTally> tally_list;
  for (const std::string& dataset : order) {
    std::vector<std::vector<bool>> per_question;
    for (auto& [id, answers] : by_dataset[dataset]) per_question.push_back(answers);
    result.datasets.push_back({dataset, pass_at_one(per_question)});
    tally_list.push_back(tallies[dataset]);
  }
  result.exact_match = mlperf_final_score(tally_list);
  return result;
}

std::string eval_table_text(const EvalRunResult& result) {
  std::string out =
      fmt::format("{:24} {:>9} {:>8} {:>8} {:>17}\n", "dataset", "questions", "samples", "pass@1", "95% CI");
  for (const DatasetSummary& d : result.datasets) {
    out += fmt::format("{:24} {:9} {:8} {:7.2f}% {:>7.2f}% - {:.2f}%\n", d.dataset, d.pass.questions, d.pass.samples,
                       100 * d.pass.pass_at_1, 100 * d.pass.ci_low, 100 * d.pass.ci_high);
  }
  out += fmt::format("exact_match (MLPerf, repeats-weighted): {:.3f}\n", result.exact_match);
  out += "95% CI: normal approximation over questions of the per-question pass rates\n";
  const std::string failures = eval_failures_text(result);
  if (!failures.empty()) out += failures + "\n";
  return out;
}

std::string eval_failures_text(const EvalRunResult& result) {
  if (result.failed_samples == 0) return "";
  for (const EvalSample& s : result.samples)
    if (!s.completion.error.empty())
      return fmt::format("INVALID: {} of {} samples failed to generate; the first: {}", result.failed_samples,
                         result.samples.size(), s.completion.error);
  return "";
}

nlohmann::json eval_sample_json(const EvalSample& s) {
  return {{"dataset", s.question->dataset},
          {"question_id", s.question->id},
          {"repeat", s.repeat},
          {"ground_truth", s.question->ground_truth},
          {"extracted_answer", s.score.extracted ? nlohmann::json(*s.score.extracted) : nlohmann::json()},
          {"is_correct", s.score.correct},
          {"evaluation_details", s.score.detail},
          {"tokens", s.completion.tokens},
          {"stopped", s.completion.stopped},
          {"text", s.completion.text}};
}

}  // namespace moeserve::eval
