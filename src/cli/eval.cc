// moeserve eval: accuracy evaluation, in two ways.
//   Offline: score outputs that exist, as MLPerf's eval_mlperf_accuracy.py (GPT-OSS) or eval_accuracy.py
//     (DeepSeek-R1) does: --accuracy-log mlperf_log_accuracy.json (or --outputs, decoded text) against
//     --reference (dataset and ground_truth per qsl_idx); prints the reference's report ending in 'exact_match'.
//   End to end: --dataset NAME=PATH questions, rendered in the model's chat format (Harmony, or DeepSeek-R1's
//     template) and answered --repeats times each by the
//     in-process engine on --model (CPU or CUDA runner) or by a server at --endpoint; prints Pass@1 per dataset
//     with its 95% confidence interval.
#include <fmt/core.h>

#include <fstream>
#include <map>
#include <memory>

#include "bench/progress.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/exit_codes.h"
#include "cli/runner_args.h"
#include "eval/eval_run.h"
#include "eval/offline_scoring.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::cli {
namespace {

using namespace moeserve::eval;

struct EvalArgs {
  // offline
  std::string accuracy_log;
  std::string outputs;
  std::string reference;
  std::string tokenizer;
  // end to end
  std::vector<std::string> datasets;
  RunnerArgs runner;
  EngineArgs engine;
  std::string endpoint;
  std::string api = "openai";
  std::string served_model;
  std::string api_key;  // --api-key, else OPENAI_API_KEY
  int repeats = 1;
  size_t limit = 0;
  std::string reasoning = "high";
  int max_tokens = 32768;
  float temperature = 1.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  uint64_t gpqa_seed = 0;
  std::string samples_out;
  // both
  std::vector<std::string> lcb_problems;
  std::string rules = "gpt-oss";
  std::string output_file;
  double lcb_timeout = 60;
  size_t lcb_workers = 0;
  std::string python = "/usr/bin/python3";
};

void write_json(const std::string& path, const nlohmann::json& value) {
  write_text_file(path, value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::unique_ptr<LcbRunner> lcb_runner(const EvalArgs& args) {
  LcbRunnerOptions options;
  options.python = args.python;
  options.timeout_seconds = args.lcb_timeout;
  options.workers = args.lcb_workers;
  auto runner = std::make_unique<LcbRunner>(options);
  // A mode that cannot keep programs away from the host lists what it leaves open (sandbox.h).
  fmt::print(stderr, "{}LiveCodeBench programs run in a sandbox: {}\n",
             runner->sandbox().exposures().empty() ? "" : "warning: ", runner->sandbox().summary());
  return runner;
}

int run_offline(const EvalArgs& args) {
  MOESERVE_CHECK(!args.reference.empty(), "eval: --reference is required to score --accuracy-log or --outputs");
  MOESERVE_CHECK(args.accuracy_log.empty() != args.outputs.empty(), "eval: give --accuracy-log or --outputs, not both");
  const Rules rules = parse_rules(args.rules);
  const std::vector<ReferenceRow> reference = load_reference(args.reference);
  MOESERVE_CHECK(!reference.empty(), "eval: the reference {} has no rows: nothing to score against", args.reference);
  std::map<std::string, std::shared_ptr<const LcbProblem>> problems;
  for (const std::string& path : args.lcb_problems) {
    for (LcbProblem& p : load_lcb_problems(path)) {
      const std::string id = p.question_id;
      problems[id] = std::make_shared<const LcbProblem>(std::move(p));
    }
  }
  std::vector<std::string> warnings;
  std::vector<ModelOutput> outputs;
  if (!args.accuracy_log.empty()) {
    const std::vector<AccuracyLogEntry> log = read_accuracy_log(args.accuracy_log);
    // An empty log is a run that answered nothing (or a wrong file), not an accuracy of 0.
    MOESERVE_CHECK(!log.empty(), "eval: the accuracy log {} has no entries: nothing to score", args.accuracy_log);
    outputs = outputs_from_log(log, reference.size(),
                               rules == Rules::deepseek_r1 ? deepseek_r1_detokenizer(args.tokenizer)
                                                           : gpt_oss_detokenizer(args.tokenizer),
                               rules, warnings);
  } else {
    outputs = load_outputs(args.outputs);
    MOESERVE_CHECK(!outputs.empty(), "eval: {} has no outputs: nothing to score", args.outputs);
  }
  bool has_code = false;
  for (const ModelOutput& o : outputs) {
    if (o.qsl_idx >= 0 && static_cast<size_t>(o.qsl_idx) < reference.size()) {
      has_code |= scorer_for_dataset(reference[static_cast<size_t>(o.qsl_idx)].dataset) == ScorerKind::livecodebench;
    }
  }
  MOESERVE_CHECK(!has_code || !problems.empty(),
                 "eval: the reference has LiveCodeBench rows: give their problems with --lcb-problems");
  const std::unique_ptr<LcbRunner> runner = has_code ? lcb_runner(args) : nullptr;
  const SampleScorer scorer(rules, std::move(problems), runner.get());
  OfflineResult result = score_outputs(std::move(outputs), reference, scorer, rules);
  result.warnings = std::move(warnings);
  fmt::print("{}", offline_report_text(result));
  if (!args.output_file.empty()) write_json(args.output_file, offline_result_json(result));
  return kExitValid;
}

std::unique_ptr<CompletionSource> completion_source(const EvalArgs& args) {
  const bool local = !args.runner.model.empty() || !args.runner.synthetic.empty();
  MOESERVE_CHECK(local != !args.endpoint.empty(), "eval: answers come from --model (or --synthetic) or --endpoint");
  if (!local) {
    bench::HttpSutOptions http;
    http.endpoint = args.endpoint;
    http.api = bench::parse_http_api(args.api);
    http.model = args.served_model;
    http.api_key = bench::resolve_api_key(args.api_key);
    return std::make_unique<HttpCompletionSource>(http, open_gpt_oss_tokenizer(args.tokenizer));
  }
  OpenedRunner opened = open_runner(args.runner);
  std::shared_ptr<const Tokenizer> tokenizer =
      args.tokenizer.empty() && (opened.checkpoint || opened.deepseek) ? Tokenizer::from_model_dir(args.runner.model)
                                                                       : open_gpt_oss_tokenizer(args.tokenizer);
  EngineConfig engine_settings = engine_config(args.engine, opened);
  return std::make_unique<EngineCompletionSource>(std::shared_ptr<ModelRunner>(std::move(opened.runner)), tokenizer,
                                                  engine_settings);
}

int run_end_to_end(const EvalArgs& args) {
  MOESERVE_CHECK(args.repeats >= 1, "eval: --repeats must be at least 1");
  MOESERVE_CHECK(args.api_key.empty() || !args.endpoint.empty(), "eval: --api-key is for --endpoint");
  std::vector<EvalQuestion> questions;
  for (const std::string& spec : args.datasets) {
    const size_t equals = spec.find('=');
    MOESERVE_CHECK(equals != std::string::npos && equals > 0, "eval: --dataset wants NAME=PATH, not \"{}\"", spec);
    const std::string name = spec.substr(0, equals);
    const std::optional<ScorerKind> kind = scorer_for_dataset(name);
    MOESERVE_CHECK(kind.has_value(),
                   "eval: no scorer for dataset \"{}\": its name must contain gpqa, mmlu_pro, math500, aime, "
                   "livecodebench or mmlu",
                   name);
    std::vector<EvalQuestion> loaded = load_questions(*kind, spec.substr(equals + 1), name, args.gpqa_seed);
    if (args.limit > 0 && loaded.size() > args.limit) loaded.resize(args.limit);
    questions.insert(questions.end(), loaded.begin(), loaded.end());
  }
  MOESERVE_CHECK(!questions.empty(), "eval: the --dataset files hold no questions: nothing to evaluate");
  bool has_code = false;
  for (const EvalQuestion& q : questions) has_code |= q.kind == ScorerKind::livecodebench;
  const std::unique_ptr<LcbRunner> runner = has_code ? lcb_runner(args) : nullptr;

  const std::unique_ptr<CompletionSource> source = completion_source(args);

  EvalRunOptions options;
  options.repeats = args.repeats;
  options.effort = harmony::parse_reasoning_effort(args.reasoning);
  options.sampling.temperature = args.temperature;
  options.sampling.top_p = args.top_p;
  options.sampling.seed = args.seed;
  options.max_tokens = args.max_tokens;
  options.rules = parse_rules(args.rules);
  fmt::print(stderr, "generating {} samples ({} questions x {}) with the {}\n", questions.size() * args.repeats,
             questions.size(), args.repeats, source->describe());
  bench::WorkProgress progress("eval: generating", questions.size() * args.repeats);
  options.progress = &progress;
  bench::ProgressLine line([&] { return progress.status(); }, bench::progress_mode(false));
  const EvalRunResult result = run_evaluation(questions, *source, runner.get(), options);
  line.finish();
  // Nothing was generated at all: a setup error (the server is down, the model cannot run), not a score of 0.
  MOESERVE_CHECK(result.failed_samples < result.samples.size(),
                 "eval: all {} samples failed to generate; the first: {}", result.samples.size(),
                 result.samples.front().completion.error);
  fmt::print("{}", eval_table_text(result));
  if (!args.samples_out.empty()) {
    std::ofstream out(args.samples_out);
    MOESERVE_CHECK(out.good(), "eval: cannot create {}", args.samples_out);
    for (const EvalSample& s : result.samples) {
      out << eval_sample_json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
  }
  if (!args.output_file.empty()) {
    nlohmann::json summary = {{"exact_match", result.exact_match},
                              {"validity", result.failed_samples == 0 ? "VALID" : "INVALID"},
                              {"samples_failed", result.failed_samples},
                              {"datasets", nlohmann::json::array()}};
    for (const DatasetSummary& d : result.datasets) {
      summary["datasets"].push_back({{"dataset", d.dataset},
                                     {"questions", d.pass.questions},
                                     {"samples", d.pass.samples},
                                     {"pass_at_1", d.pass.pass_at_1},
                                     {"ci95", {d.pass.ci_low, d.pass.ci_high}}});
    }
    write_json(args.output_file, summary);
  }
  return result.failed_samples == 0 ? kExitValid : kExitInvalid;
}

}  // namespace

void register_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "accuracy: score an MLPerf accuracy log, or generate and score answers");
  auto* offline = cmd->add_option_group("offline", "score existing outputs");
  offline->add_option("--accuracy-log", args->accuracy_log, "mlperf_log_accuracy.json to score");
  offline->add_option("--outputs", args->outputs, "JSON lines {qsl_idx, text[, token_count]} to score");
  offline->add_option("--reference", args->reference, "JSON lines {dataset, ground_truth}, one per qsl_idx");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer file or model directory, to decode --accuracy-log or talk to --endpoint (default: the "
                  "o200k ranks; with --model its tokenizer.json)");
  auto* generate = cmd->add_option_group("end to end", "generate answers and score them");
  generate->add_option("--dataset", args->datasets,
                       "NAME=PATH, repeatable; NAME picks the scorer (aime25, gpqa_diamond, math500, mmlu_pro, "
                       "livecodebench...)");
  add_runner_options(generate, args->runner);
  add_engine_options(generate, args->engine);
  generate->add_option("--endpoint", args->endpoint, "a server to ask instead: http://host:port");
  generate->add_option("--api", args->api, "the endpoint's API")
      ->check(CLI::IsMember({"openai", "sglang"}))
      ->capture_default_str();
  generate->add_option("--served-model", args->served_model, "the endpoint's model name (default: its first)");
  generate->add_option("--api-key", args->api_key,
                       "sent to --endpoint as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)");
  generate->add_option("--repeats", args->repeats, "answers per question (pass@1 averages them)")
      ->capture_default_str();
  generate->add_option("--limit", args->limit, "first N questions of each dataset (0: all)")->capture_default_str();
  generate->add_option("--reasoning", args->reasoning, "reasoning effort")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  generate->add_option("--max-tokens", args->max_tokens, "tokens per answer at most")->capture_default_str();
  generate->add_option("--temperature", args->temperature)->capture_default_str();
  generate->add_option("--top-p", args->top_p)->capture_default_str();
  generate->add_option("--seed", args->seed, "sampling seed of the first sample (then +1 per sample)")
      ->capture_default_str();
  generate->add_option("--gpqa-seed", args->gpqa_seed, "seed of the GPQA answer shuffle")->capture_default_str();
  generate->add_option("--samples-out", args->samples_out, "write every sample as a JSON line here");
  cmd->add_option("--lcb-problems", args->lcb_problems,
                  "LiveCodeBench release JSON lines (offline: the problems the ground truths name)");
  cmd->add_option("--rules", args->rules, "scoring rules")
      ->check(CLI::IsMember({"gpt-oss", "deepseek-r1"}))
      ->capture_default_str();
  cmd->add_option("--output-file", args->output_file, "write the results as JSON here");
  cmd->add_option("--lcb-timeout", args->lcb_timeout, "seconds per LiveCodeBench test")->capture_default_str();
  cmd->add_option("--lcb-workers", args->lcb_workers, "LiveCodeBench programs run at once (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--python", args->python, "the python3 that runs LiveCodeBench programs")->capture_default_str();
  cmd->footer(exit_codes_help("the outputs were scored (whatever the score)",
                              "INVALID: some end-to-end samples failed to generate (scored as wrong)"));
  cmd->callback([args] {
    run_verdict_command([args] {
      const bool offline_mode = !args->accuracy_log.empty() || !args->outputs.empty();
      MOESERVE_CHECK(offline_mode != !args->datasets.empty(),
                     "eval: give either --accuracy-log/--outputs with --reference, or --dataset with --model or "
                     "--endpoint");
      return offline_mode ? run_offline(*args) : run_end_to_end(*args);
    });
  });
}

}  // namespace moeserve::cli
