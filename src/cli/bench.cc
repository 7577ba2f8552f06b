// moeserve bench: MLPerf Inference's load generation for GPT-OSS-120B and DeepSeek-R1 (LoadGen 6.0.17's rules,
// reproduced in src/bench/) against the in-process engine (--model) or an HTTP server (--endpoint).
#include <fmt/core.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <functional>
#include <memory>

#include "bench/dataset.h"
#include "bench/driver.h"
#include "bench/find_peak.h"
#include "bench/gpu_info.h"
#include "bench/progress.h"
#include "bench/pubmed.h"
#include "bench/report.h"
#include "bench/repro.h"
#include "bench/sut_http.h"
#include "bench/sut_inprocess.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/exit_codes.h"
#include "cli/runner_args.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::cli {
namespace {

using namespace moeserve::bench;

std::atomic<bool> g_interrupted{false};
extern "C" void on_stop_signal(int) { g_interrupted.store(true); }

// SIGINT and SIGTERM cancel what is in flight and still write the logs; the previous handlers come back after.
class StopSignals {
 public:
  StopSignals() : int_(std::signal(SIGINT, on_stop_signal)), term_(std::signal(SIGTERM, on_stop_signal)) {}
  ~StopSignals() {
    std::signal(SIGINT, int_);
    std::signal(SIGTERM, term_);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void (*int_)(int);
  void (*term_)(int);
};

struct BenchArgs {
  std::string benchmark = "gpt-oss-120b";
  std::string scenario = "server";
  RunnerArgs runner;
  EngineArgs engine;
  bool hash_checkpoint = false;
  std::string endpoint;
  std::string api = "openai";
  std::string served_model;
  std::string api_key;  // --api-key, else OPENAI_API_KEY
  int http_threads = 1;
  int max_consecutive_failures = 10;
  std::string dataset;
  std::string reasoning = "low";  // pubmed: MLPerf's harmonize script renders at low effort
  SyntheticSpec synthetic;
  bool synthetic_vocab_given = false;
  std::string output_dir;
  bool accuracy = false;
  std::string mlperf_conf;
  std::string user_conf;
  std::string log_schedule;
  std::string seeds;
  int max_output_tokens = 0;
  std::vector<std::function<void(SamplingParams&)>> sampling_overrides;
  bool no_progress = false;
  // --find-peak (Server and Interactive): LoadGen's FindPeakPerformance search (find_peak.h).
  bool find_peak = false;
  FindPeakOptions find_peak_options;
  int find_peak_decimals = 1;
  double probe_duration = 30;
  // LoadGen settings given as flags: applied after the conf files, in command-line order.
  std::vector<std::function<void(TestSettings&)>> setting_overrides;
};

Scenario loadgen_scenario(const std::string& name) {
  if (name == "offline") return Scenario::offline;
  if (name == "singlestream") return Scenario::single_stream;
  return Scenario::server;  // server and interactive
}

// One flag per LoadGen setting, in the conf files' units unless the flag says otherwise.
void add_setting_flags(CLI::App* cmd, BenchArgs& a) {
  auto f64 = [&](const char* name, const char* help, std::function<void(TestSettings&, double)> set) {
    cmd->add_option_function<double>(
           name, [&a, set](const double& v) { a.setting_overrides.push_back([=](TestSettings& s) { set(s, v); }); },
           help)
        ->group("LoadGen settings (override mlperf.conf and user.conf)");
  };
  auto u64 = [&](const char* name, const char* help, std::function<void(TestSettings&, uint64_t)> set) {
    cmd->add_option_function<uint64_t>(
           name, [&a, set](const uint64_t& v) { a.setting_overrides.push_back([=](TestSettings& s) { set(s, v); }); },
           help)
        ->group("LoadGen settings (override mlperf.conf and user.conf)");
  };
  auto ms_to_ns = [](double ms) { return static_cast<uint64_t>(ms * 1e6); };
  f64("--target-qps", "Server: Poisson arrival rate; Offline: expected samples/s (sizes the query)",
      [](TestSettings& s, double v) { s.server_target_qps = s.offline_expected_qps = v; });
  f64("--min-duration", "seconds the run must last (LoadGen min_duration)",
      [](TestSettings& s, double v) { s.min_duration_ms = static_cast<uint64_t>(v * 1000); });
  f64("--max-duration", "seconds after which issuing stops (0: none)",
      [](TestSettings& s, double v) { s.max_duration_ms = static_cast<uint64_t>(v * 1000); });
  u64("--min-query-count", "queries the run must issue", [](TestSettings& s, uint64_t v) { s.min_query_count = v; });
  u64("--max-query-count", "queries after which issuing stops (0: none)",
      [](TestSettings& s, uint64_t v) { s.max_query_count = v; });
  u64("--performance-sample-count", "the performance set's size (performance_sample_count_override)",
      [](TestSettings& s, uint64_t v) { s.performance_sample_count_override = v; });
  u64("--accuracy-sample-count", "samples an accuracy run issues (accuracy_sample_count_override)",
      [](TestSettings& s, uint64_t v) { s.accuracy_sample_count_override = v; });
  f64("--ttft-latency", "p99 TTFT bound, ms", [=](TestSettings& s, double v) { s.server_ttft_latency = ms_to_ns(v); });
  f64("--tpot-latency", "p99 TPOT bound, ms", [=](TestSettings& s, double v) { s.server_tpot_latency = ms_to_ns(v); });
  f64("--target-latency", "Server latency bound without token latencies, ms",
      [=](TestSettings& s, double v) { s.server_target_latency_ns = ms_to_ns(v); });
  f64("--target-latency-percentile", "percentile the bounds apply at, % (Server; SingleStream's result)",
      [](TestSettings& s, double v) {
        s.server_target_latency_percentile = s.single_stream_target_latency_percentile = v / 100;
      });
  f64("--single-stream-expected-latency", "SingleStream: expected latency, ms (sizes the schedule)",
      [](TestSettings& s, double v) { s.single_stream_expected_latency_ns = v * 1e6; });
  u64("--equal-issue", "1: issue whole permutations of the sample set (sample_concatenate_permutation)",
      [](TestSettings& s, uint64_t v) { s.sample_concatenate_permutation = v == 1; });
  u64("--performance-issue-unique", "1: issue every loaded sample exactly once",
      [](TestSettings& s, uint64_t v) { s.performance_issue_unique = v != 0; });
  u64("--performance-issue-same", "1: issue one sample always",
      [](TestSettings& s, uint64_t v) { s.performance_issue_same = v != 0; });
  u64("--performance-issue-same-index", "the sample --performance-issue-same repeats",
      [](TestSettings& s, uint64_t v) { s.performance_issue_same_index = v; });
  u64("--qsl-rng-seed", "seed of the performance set", [](TestSettings& s, uint64_t v) { s.qsl_rng_seed = v; });
  u64("--sample-index-rng-seed", "seed of the sample order",
      [](TestSettings& s, uint64_t v) { s.sample_index_rng_seed = v; });
  u64("--schedule-rng-seed", "seed of the arrival times", [](TestSettings& s, uint64_t v) { s.schedule_rng_seed = v; });
  u64("--accuracy-log-rng-seed", "seed of the performance-mode accuracy-log sampling",
      [](TestSettings& s, uint64_t v) { s.accuracy_log_rng_seed = v; });
  f64("--accuracy-log-probability", "fraction of performance-mode responses logged, % (as in conf files)",
      [](TestSettings& s, double v) { s.accuracy_log_probability = v / 100; });
  u64("--accuracy-log-sampling-target", "about this many performance-mode responses logged",
      [](TestSettings& s, uint64_t v) { s.accuracy_log_sampling_target = v; });
  u64("--max-async-queries", "Server: stop when more queries are outstanding (0: no limit)",
      [](TestSettings& s, uint64_t v) { s.server_max_async_queries = v; });
  u64("--coalesce-queries", "Server: 1 lets LoadGen merge past-due queries (every sample keeps its own time)",
      [](TestSettings& s, uint64_t v) { s.server_coalesce_queries = v != 0; });
  u64("--use-token-latencies", "1: measure and bound TTFT and TPOT",
      [](TestSettings& s, uint64_t v) { s.use_token_latencies = v == 1; });
}

// Each requested setting's source, by the last stage that changed it: default, mlperf.conf, --seeds, user.conf or
// flag (the report marks what overrides mlperf.conf).
void note_sources(const nlohmann::json& before, const TestSettings& after, const char* source,
                  nlohmann::json& sources) {
  const nlohmann::json now = requested_settings_json(after);
  for (const auto& [key, value] : now.items())
    if (before[key] != value) sources[key] = source;
}

TestSettings resolve_settings(const BenchArgs& a, const std::string& model, Scenario scenario,
                              nlohmann::json& sources) {
  TestSettings s;
  s.scenario = scenario;
  s.mode = a.accuracy ? TestMode::accuracy_only : TestMode::performance_only;
  sources = nlohmann::json::object();
  nlohmann::json before = requested_settings_json(s);
  const ConfFile mlperf = a.mlperf_conf.empty() ? ConfFile::parse(kBuiltinMlperfConf, "built-in mlperf.conf")
                                                : ConfFile::read(a.mlperf_conf);
  apply_conf(mlperf, model, scenario, ConfRole::mlperf_conf, s);
  note_sources(before, s, "mlperf.conf", sources);
  before = requested_settings_json(s);
  if (!a.seeds.empty()) {
    const RoundSeeds seeds = round_seeds(a.seeds);
    s.qsl_rng_seed = seeds.qsl_rng_seed;
    s.sample_index_rng_seed = seeds.sample_index_rng_seed;
    s.schedule_rng_seed = seeds.schedule_rng_seed;
    note_sources(before, s, "--seeds", sources);
    before = requested_settings_json(s);
  }
  if (!a.user_conf.empty()) {
    apply_conf(ConfFile::read(a.user_conf), model, scenario, ConfRole::user_conf, s);
    note_sources(before, s, "user.conf", sources);
    before = requested_settings_json(s);
  }
  for (const auto& set : a.setting_overrides) set(s);
  // --accuracy wins over a conf file's mode.
  s.mode = a.accuracy ? TestMode::accuracy_only : s.mode;
  note_sources(before, s, "flag", sources);
  return s;
}

// The in-process engine over --model (or --synthetic), with what a result must record about it.
// The slo scheduler aims at the run's own bounds unless --ttft-target-ms / --tpot-target-ms say otherwise: a
// Server or Interactive run's TTFT / TPOT latencies (Interactive gpt-oss-120b: 2 s / 15 ms, not the engine's
// Server defaults of 3 s / 80 ms).
EngineArgs engine_args_for(const BenchArgs& a, Scenario scenario, const TestSettings& settings) {
  EngineArgs engine = a.engine;
  if (scenario == Scenario::server) {
    if (!engine.ttft_target_seconds) engine.ttft_target_seconds = static_cast<double>(settings.server_ttft_latency) / 1e9;
    if (!engine.tpot_target_seconds) engine.tpot_target_seconds = static_cast<double>(settings.server_tpot_latency) / 1e9;
  }
  return engine;
}

std::unique_ptr<SystemUnderTest> open_inprocess(const BenchArgs& a, const EngineArgs& engine_args, int32_t& vocab_size) {
  OpenedRunner opened = open_runner(a.runner);
  const ModelConfig& config = opened.runner->config();
  vocab_size = static_cast<int32_t>(config.vocab_size);
  nlohmann::json description = {
      {"kind", "in-process"},
      {"runner", opened.runner->name()},
      {"device", a.runner.device},
      {"kv_cache_and_activations",
       a.runner.device == "cpu" ? std::string("f32 (CPU reference runner)") : a.runner.precision}};
  if (opened.checkpoint) {
    description["checkpoint"] = describe_checkpoint(a.runner.model, a.hash_checkpoint);
    description["weights"] = describe_loaded_weights(*opened.checkpoint);
  } else if (opened.deepseek) {
    description["checkpoint"] = describe_checkpoint(a.runner.model, a.hash_checkpoint);
    description["weights"] = opened.deepseek->weight_formats();
  } else {
    description["checkpoint"] = {{"synthetic", a.runner.synthetic}, {"router", a.runner.synthetic_router}};
  }
  std::vector<int32_t> eos(config.eos_token_ids.begin(), config.eos_token_ids.end());
  EngineConfig engine_settings = engine_config(engine_args, opened);
  auto engine = std::make_shared<Engine>(std::shared_ptr<ModelRunner>(std::move(opened.runner)), engine_settings);
  const SchedulerConfig& scheduler = engine_settings.scheduler;
  description["engine"] = {
      {"kv_cache", engine->capacity_summary()},
      {"kv_cache_dtype", a.runner.kv_cache_dtype},
      {"activation_dtype", a.runner.activation_dtype},
      {"block_size", engine_settings.block_size},
      {"max_model_len", engine->max_sequence_tokens()},
      {"max_num_seqs", scheduler.max_num_seqs},
      {"max_batched_tokens", scheduler.max_batched_tokens},
      {"scheduler", a.engine.scheduler},
      {"kv_watermark", scheduler.kv_watermark},
      {"prefix_caching", engine_settings.prefix_caching},
      {"async_scheduling", engine_settings.async_scheduling},
      {"speculative_config", a.engine.speculative_config.empty() ? nlohmann::json(nullptr)
                                                                 : nlohmann::json::parse(a.engine.speculative_config)}};
  if (scheduler.policy == SchedulingPolicy::slo)
    description["engine"]["slo_targets"] = {{"ttft_seconds", scheduler.ttft_target_seconds},
                                            {"tpot_seconds", scheduler.tpot_target_seconds},
                                            {"min_prefill_tokens", scheduler.min_prefill_tokens},
                                            {"tpot_headroom", scheduler.tpot_headroom},
                                            {"expected_output_tokens",
                                             scheduler.expected_output_tokens > 0
                                                 ? nlohmann::json(scheduler.expected_output_tokens)
                                                 : nlohmann::json("learnt")}};
  description["runner_settings"] = {
      {"device", a.runner.device},
      {"precision", a.runner.precision},
      {"kv_cache_dtype", a.runner.kv_cache_dtype},
      {"activation_dtype", a.runner.activation_dtype},
      {"threads", a.runner.threads == 0 ? std::string("all cores") : std::to_string(a.runner.threads)},
      {"synthetic_router", a.runner.synthetic.empty() ? "" : a.runner.synthetic_router},
      {"moe_path_table", a.runner.moe_path_table.empty() ? "built-in" : a.runner.moe_path_table},
      {"tensor_parallel_size", a.runner.tensor_parallel_size},
      {"enable_expert_parallel", a.runner.enable_expert_parallel}};
  return std::make_unique<InProcessSut>(std::move(engine), std::move(eos), std::move(description));
}

// --dataset: a file, "synthetic", or "pubmed:FILE" rendered in Harmony with the model's tokenizer (o200k_harmony
// when the model is behind an endpoint).
Dataset load_bench_dataset(const BenchArgs& a, const SyntheticSpec& synthetic) {
  const std::string pubmed = "pubmed:";
  if (a.dataset.rfind(pubmed, 0) != 0) return load_dataset(a.dataset, synthetic);
  const std::shared_ptr<const Tokenizer> tokenizer =
      a.runner.model.empty() ? Tokenizer::o200k_harmony() : Tokenizer::from_model_dir(a.runner.model);
  return load_pubmed_dataset(a.dataset.substr(pubmed.size()), *tokenizer, harmony::parse_reasoning_effort(a.reasoning));
}

// --find-peak: short probes (their LoadGen logs under OUTPUT_DIR/find_peak/), then the confirming run into
// OUTPUT_DIR itself, which becomes `result` (the last probe does when no probe passed); returns the search for the
// result JSON.
nlohmann::json search_peak(const BenchArgs& a, SystemUnderTest& sut, const Dataset& dataset, const BenchConfig& full,
                           EnergyMeter* energy, RunResult& result) {
  const auto n = static_cast<uint64_t>(dataset.samples.size());
  FindPeakOptions options = a.find_peak_options;
  options.start_qps = full.settings.target_qps;
  options.tolerance_qps = std::pow(10.0, -a.find_peak_decimals);
  int index = 0;
  auto probe = [&](double qps, bool confirm) {
    BenchConfig c = confirm ? confirm_config(full, qps, n) : probe_config(full, qps, a.probe_duration, n);
    if (!confirm) c.output_dir = fmt::format("{}/find_peak/probe_{:02}_qps_{:.4g}", full.output_dir, ++index, qps);
    fmt::print(stderr, "find-peak: {} at {:.4g} qps ({}) ...\n", confirm ? "confirming run" : "probe", qps,
               confirm ? "full settings" : fmt::format("{:g} s", a.probe_duration));
    RunResult r = run_benchmark(sut, dataset, c, confirm ? energy : nullptr);
    ProbeResult p = probe_result(r, confirm);
    std::string why;
    for (const std::string& reason : p.reasons) why += (why.empty() ? ": " : "; ") + reason;
    fmt::print(stderr, "find-peak: {:.4g} qps {} | p99 TTFT {:.3f} s, p99 TPOT {:.2f} ms, {:.1f} tokens/s{}\n", qps,
               p.valid ? "VALID" : "INVALID", p.p99_ttft_s, p.p99_tpot_ms, p.tokens_per_second, why);
    result = std::move(r);  // the last run is the result: the last confirmation, else the last probe
    return p;
  };
  const FindPeakResult found = find_peak(probe, options);
  if (found.peak_qps)
    fmt::print(stderr, "find-peak: highest VALID target_qps {:.4g}, {:.1f} completed tokens/s\n", *found.peak_qps,
               result.summary ? result.summary->completed_tokens_per_second() : 0.0);
  return find_peak_json(found, options);
}

int run(const BenchArgs& a) {
  MOESERVE_CHECK(a.endpoint.empty() != (a.runner.model.empty() && a.runner.synthetic.empty()),
                 "give either --model DIR (in-process) or --endpoint URL");
  MOESERVE_CHECK(a.api_key.empty() || !a.endpoint.empty(),
                 "--api-key is for --endpoint (the in-process engine has no key)");
  const BenchmarkDefinition& definition = benchmark_definition(a.benchmark);
  const bool interactive = a.scenario == "interactive";
  const Scenario scenario = loadgen_scenario(a.scenario);
  const std::string model = loadgen_model_name(a.benchmark, interactive);
  nlohmann::json setting_sources;
  const TestSettings requested = resolve_settings(a, model, scenario, setting_sources);
  MOESERVE_CHECK(!a.dataset.empty(), "--dataset is required");
  MOESERVE_CHECK(!a.find_peak || (scenario == Scenario::server && !a.accuracy),
                 "--find-peak searches Server and Interactive performance runs (not {}{})", a.scenario,
                 a.accuracy ? " accuracy" : "");

  int32_t vocab_size = a.synthetic.vocab_size;
  std::unique_ptr<SystemUnderTest> sut;
  if (a.endpoint.empty()) {
    sut = open_inprocess(a, engine_args_for(a, scenario, requested), vocab_size);
  } else {
    HttpSutOptions http;
    http.endpoint = a.endpoint;
    http.api = parse_http_api(a.api);
    http.model = a.served_model;
    http.api_key = resolve_api_key(a.api_key);
    http.io_threads = a.http_threads;
    sut = std::make_unique<HttpSut>(std::move(http));
  }
  SyntheticSpec synthetic = a.synthetic;
  if (!a.synthetic_vocab_given) synthetic.vocab_size = vocab_size;
  const Dataset dataset = load_bench_dataset(a, synthetic);

  BenchConfig config;
  const auto n = static_cast<uint64_t>(dataset.samples.size());
  config.settings = effective_settings(requested, n, n);
  config.max_output_tokens = a.max_output_tokens > 0 ? a.max_output_tokens
                             : a.accuracy            ? definition.max_output_tokens_accuracy
                                                     : definition.max_output_tokens_performance;
  config.sampling = definition.sampling;
  for (const auto& set : a.sampling_overrides) set(config.sampling);
  const std::string scenario_label = interactive ? "Interactive" : scenario_name(scenario);
  config.output_dir = !a.output_dir.empty() ? a.output_dir
                                            : fmt::format("bench_results/{}/{}/{}", a.benchmark, scenario_label,
                                                          a.accuracy ? "accuracy" : "performance");
  config.schedule_log_path = a.log_schedule;
  config.loadgen_version = fmt::format("6.0.17 (reimplemented by moeserve {})", MOESERVE_VERSION);
  config.progress = progress_mode(a.no_progress);
  config.interrupt = &g_interrupted;
  config.max_consecutive_failures = a.max_consecutive_failures;

  std::unique_ptr<EnergyMeter> energy = open_energy_meter();
  nlohmann::json context = {
      {"benchmark", a.benchmark},
      {"loadgen_model", model},
      {"scenario", scenario_label},
      {"max_output_tokens", config.max_output_tokens},
      {"sampling",
       {{"temperature", config.sampling.temperature},
        {"top_p", config.sampling.top_p},
        {"top_k", config.sampling.top_k}}},
      {"mlperf_conf", a.mlperf_conf.empty() ? "built-in (LoadGen 6.0.17 mlperf.conf)" : a.mlperf_conf},
      {"user_conf", a.user_conf},
      {"dataset", dataset.describe()},
      {"setting_sources", setting_sources},
      {"build_and_host", describe_build_and_host()},
      {"gpus", describe_gpus()}};
  if (energy) {
    context["energy_method"] = energy->method();
  } else {
    context["energy_absent_reason"] = context["gpus"].value("reason", "no GPU energy reading");
  }
  fmt::print(stderr, "moeserve bench: {} {} {} on {} ({} samples from {}), results in {}\n", a.benchmark,
             scenario_label, a.accuracy ? "accuracy" : "performance", sut->name(), dataset.samples.size(), dataset.path,
             config.output_dir);

  g_interrupted.store(false);
  RunResult result;
  std::optional<nlohmann::json> search;
  {
    StopSignals signals;
    if (a.find_peak) {
      search = search_peak(a, *sut, dataset, config, energy.get(), result);
    } else {
      result = run_benchmark(*sut, dataset, config, energy.get());
    }
  }
  context["system_under_test"] = sut->describe();
  nlohmann::json json = result_json(result, context);
  if (search) json["find_peak"] = *search;
  const std::string html = write_reports(config.output_dir, json);
  fmt::print("{}", result.summary_text);
  fmt::print("\n{}\n", result_headline(json));
  if (search) fmt::print("find-peak: {}\n", (*search)["outcome"].get<std::string>());
  fmt::print("report: {}\nLoadGen logs: {}/mlperf_log_{{summary.txt,detail.txt,accuracy.json}}\n", html,
             config.output_dir);
  if (result.interrupted) return kExitInterrupted;
  if (search && !search->contains("peak_qps")) return kExitInvalid;
  return run_valid(result) ? kExitValid : kExitInvalid;
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "benchmark a model as MLPerf Inference (LoadGen 6.0.17) does");
  cmd->add_option("--benchmark", a->benchmark, "gpt-oss-120b or deepseek-r1")
      ->check(CLI::IsMember({"gpt-oss-120b", "deepseek-r1"}))
      ->capture_default_str();
  cmd->add_option("--scenario", a->scenario, "offline, server, interactive or singlestream")
      ->check(CLI::IsMember({"offline", "server", "interactive", "singlestream"}))
      ->capture_default_str();
  add_runner_options(cmd, a->runner);
  add_engine_options(cmd, a->engine);
  cmd->add_flag("--hash-checkpoint", a->hash_checkpoint, "record the SHA-256 of every checkpoint file");
  cmd->add_option("--endpoint", a->endpoint, "an OpenAI-compatible or SGLang server, http://host:port");
  cmd->add_option("--api", a->api, "openai (/v1/completions) or sglang (/generate)")
      ->check(CLI::IsMember({"openai", "sglang"}))
      ->capture_default_str();
  cmd->add_option("--served-model", a->served_model, "the OpenAI 'model' field (default: the server's first)");
  cmd->add_option("--api-key", a->api_key,
                  "sent to --endpoint as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY); not recorded");
  cmd->add_option("--http-threads", a->http_threads, "HTTP client I/O threads")->capture_default_str();
  cmd->add_option("--max-consecutive-failures", a->max_consecutive_failures,
                  "stop the run after this many samples failed in a row (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Required for a run (checked there: `bench compare` needs none).
  cmd->add_option("--dataset", a->dataset,
                  "a .parquet or .jsonl file of token-id prompts, 'synthetic', or pubmed:FILE (articles to render); "
                  "required");
  cmd->add_option("--reasoning", a->reasoning, "pubmed:FILE: the reasoning effort the prompts are rendered at")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  cmd->add_option("--synthetic-samples", a->synthetic.samples, "synthetic dataset: samples")->capture_default_str();
  cmd->add_option("--synthetic-input", a->synthetic.input_length,
                  "synthetic prompt lengths: N, uniform:LO:HI or normal:MEAN:STD")
      ->capture_default_str();
  cmd->add_option("--synthetic-output", a->synthetic.output_length, "synthetic output lengths (same forms)")
      ->capture_default_str();
  cmd->add_option("--synthetic-seed", a->synthetic.seed, "synthetic dataset: seed")->capture_default_str();
  cmd->add_option_function<int32_t>(
      "--synthetic-vocab",
      [a](const int32_t& v) {
        a->synthetic.vocab_size = v;
        a->synthetic_vocab_given = true;
      },
      "synthetic prompt token ids are drawn from [0, this) (default: the model's vocabulary, or 200000)");
  cmd->add_option("--output-dir", a->output_dir,
                  "where logs and reports go (default bench_results/BENCHMARK/SCENARIO/MODE)");
  cmd->add_flag("--accuracy", a->accuracy, "accuracy mode: every sample once, every response logged");
  cmd->add_option("--mlperf-conf", a->mlperf_conf, "LoadGen mlperf.conf to use instead of the built-in copy");
  cmd->add_option("--user-conf", a->user_conf, "LoadGen user.conf overrides");
  cmd->add_option("--log-schedule", a->log_schedule,
                  "write one JSON line per issued sample (seq, qsl_idx, scheduled_ns)");
  cmd->add_option("--seeds", a->seeds, "use the RNG seeds of MLPerf round v6.0 or v6.1")
      ->check(CLI::IsMember({"v6.0", "v6.1"}));
  cmd->add_option("--max-output-tokens", a->max_output_tokens,
                  "max new tokens per sample (default: the benchmark's, by mode)");
  cmd->add_option_function<float>(
      "--temperature",
      [a](const float& v) { a->sampling_overrides.push_back([v](SamplingParams& s) { s.temperature = v; }); },
      "sampling temperature (default: the benchmark's)");
  cmd->add_option_function<float>(
      "--top-p", [a](const float& v) { a->sampling_overrides.push_back([v](SamplingParams& s) { s.top_p = v; }); },
      "top-p (default: the benchmark's)");
  cmd->add_option_function<int>(
      "--top-k", [a](const int& v) { a->sampling_overrides.push_back([v](SamplingParams& s) { s.top_k = v; }); },
      "top-k, 0 off (default: the benchmark's)");
  cmd->add_flag("--no-progress", a->no_progress,
                "no progress (else a live line on a terminal, a plain line every 30 s otherwise)");
  const char* search = "Find peak (LoadGen's FindPeakPerformance: Server and Interactive)";
  cmd->add_flag("--find-peak", a->find_peak,
                "search the highest VALID target_qps: bracket from --target-qps, bisect, confirm at full settings")
      ->group(search);
  cmd->add_option("--find-peak-decimals", a->find_peak_decimals,
                  "stop bisecting within 10^-N qps (LoadGen server_find_peak_qps_decimals_of_precision)")
      ->check(CLI::Range(0, 4))
      ->capture_default_str()
      ->group(search);
  cmd->add_option("--find-peak-step", a->find_peak_options.step,
                  "bracket by factors of 1 + this (LoadGen server_find_peak_qps_boundary_step_size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(search);
  cmd->add_option("--find-peak-probe-duration", a->probe_duration, "seconds each probe runs (its min_duration)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(search);
  cmd->add_option("--find-peak-max-probes", a->find_peak_options.max_probes, "probes at most, before confirming")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(search);
  add_setting_flags(cmd, *a);
  cmd->footer(exit_codes_help("VALID",
                              "INVALID (LoadGen's verdict, or any failed sample; in accuracy mode any "
                              "failed sample or logged error)"));
  CLI::App* compare = register_bench_compare(*cmd);
  cmd->callback([a, compare] {
    if (compare->parsed()) return;
    run_verdict_command([a] { return run(*a); });
  });
}

}  // namespace moeserve::cli
