#include "bench/settings.h"

#include <algorithm>
#include <set>

#include "util/error.h"

namespace moeserve::bench {

const char* scenario_name(Scenario scenario) {
  switch (scenario) {
    case Scenario::single_stream:
      return "SingleStream";
    case Scenario::server:
      return "Server";
    case Scenario::offline:
      return "Offline";
  }
  return "?";
}

const char* test_mode_name(TestMode mode) {
  return mode == TestMode::accuracy_only ? "AccuracyOnly" : "PerformanceOnly";
}

namespace {

std::vector<BenchmarkDefinition> make_definitions() {
  BenchmarkDefinition gpt_oss;
  gpt_oss.name = "gpt-oss-120b";
  gpt_oss.max_output_tokens_performance = 10240;
  gpt_oss.max_output_tokens_accuracy = 32768;
  gpt_oss.sampling.temperature = 1.0f;
  gpt_oss.sampling.top_p = 1.0f;
  gpt_oss.sampling.top_k = 0;
  BenchmarkDefinition deepseek;
  deepseek.name = "deepseek-r1";
  deepseek.max_output_tokens_performance = 20000;
  deepseek.max_output_tokens_accuracy = 20000;
  deepseek.sampling.temperature = 0.0f;
  return {gpt_oss, deepseek};
}

}  // namespace

const BenchmarkDefinition& benchmark_definition(std::string_view name) {
  static const std::vector<BenchmarkDefinition> definitions = make_definitions();
  for (const auto& definition : definitions)
    if (definition.name == name) return definition;
  fail("unknown benchmark '{}' (expected gpt-oss-120b or deepseek-r1)", name);
}

std::vector<std::string> benchmark_names() { return {"gpt-oss-120b", "deepseek-r1"}; }

std::string loadgen_model_name(const std::string& benchmark, bool interactive) {
  return interactive ? benchmark + "-interactive" : benchmark;
}

// Copied line for line from LoadGen's mlperf.conf (loadgen/mlperf.conf at 6.0.17); only our models' lines and the
// global lines that apply to them. Times in ms, percentiles in %.
const char* const kBuiltinMlperfConf = R"(# LoadGen mlperf.conf (6.0.17), the lines for gpt-oss-120b and deepseek-r1
gpt-oss-120b.*.performance_sample_count_override = 6396
gpt-oss-120b.*.accuracy_sample_count_override = 4395
gpt-oss-120b-interactive.*.performance_sample_count_override = 6396
gpt-oss-120b-interactive.*.accuracy_sample_count_override = 4395
deepseek-r1.*.performance_sample_count_override = 4388
deepseek-r1-interactive.*.performance_sample_count_override = 4388
*.*.qsl_rng_seed = 2085463073848966840
*.*.sample_index_rng_seed = 2747215439041700203
*.*.schedule_rng_seed = 16159082839903944936
*.SingleStream.target_latency_percentile = 90
*.SingleStream.min_duration = 600000
deepseek-r1.*.sample_concatenate_permutation = 1
deepseek-r1-interactive.*.sample_concatenate_permutation = 1
gpt-oss-120b.*.sample_concatenate_permutation = 1
gpt-oss-120b-interactive.*.sample_concatenate_permutation = 1
*.Server.target_latency = 10
*.Server.target_latency_percentile = 99
*.Server.target_duration = 0
*.Server.min_duration = 600000
deepseek-r1.*.use_token_latencies = 1
deepseek-r1-interactive.*.use_token_latencies = 1
gpt-oss-120b.*.use_token_latencies = 1
gpt-oss-120b-interactive.*.use_token_latencies = 1
deepseek-r1.Server.target_latency = 0
deepseek-r1.Server.ttft_latency = 2000
deepseek-r1.Server.tpot_latency = 80
deepseek-r1-interactive.Server.target_latency = 0
deepseek-r1-interactive.Server.ttft_latency = 1500
deepseek-r1-interactive.Server.tpot_latency = 15
gpt-oss-120b.Server.target_latency = 0
gpt-oss-120b.Server.ttft_latency = 3000
gpt-oss-120b.Server.tpot_latency = 80
gpt-oss-120b-interactive.Server.target_latency = 0
gpt-oss-120b-interactive.Server.ttft_latency = 2000
gpt-oss-120b-interactive.Server.tpot_latency = 15
*.Offline.target_latency_percentile = 90
*.Offline.min_duration = 600000
deepseek-r1.Offline.min_query_count = 4388
*.SingleStream.target_latency = 10
*.Server.target_qps = 1.0
*.Offline.target_qps = 1.0
)";

RoundSeeds round_seeds(std::string_view round) {
  // v6.0: mlcommons/inference f131a0d2; v6.1: b0662794 (the seeds in kBuiltinMlperfConf).
  if (round == "v6.0") return {2465351861681999779ULL, 14276810075590677512ULL, 3936089224930324775ULL};
  if (round == "v6.1") return {2085463073848966840ULL, 2747215439041700203ULL, 16159082839903944936ULL};
  fail("unknown round '{}' for the seeds (expected v6.0 or v6.1)", round);
}

namespace {

// Every key TestSettings::FromConfig reads, plus target_duration, which mlperf.conf sets and LoadGen ignores.
const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {"mode",
                                             "qsl_rng_seed",
                                             "sample_index_rng_seed",
                                             "schedule_rng_seed",
                                             "accuracy_log_probability",
                                             "test05",
                                             "test05_qsl_rng_seed",
                                             "test05_sample_index_rng_seed",
                                             "test05_schedule_rng_seed",
                                             "use_token_latencies",
                                             "ttft_latency",
                                             "tpot_latency",
                                             "infer_token_latencies",
                                             "token_latency_scaling_factor",
                                             "target_latency_percentile",
                                             "samples_per_query",
                                             "target_latency",
                                             "performance_issue_unique",
                                             "performance_issue_same",
                                             "performance_issue_same_index",
                                             "sample_concatenate_permutation",
                                             "coalesce_queries",
                                             "max_async_queries",
                                             "min_duration",
                                             "max_duration",
                                             "min_query_count",
                                             "max_query_count",
                                             "performance_sample_count_override",
                                             "accuracy_sample_count_override",
                                             "target_qps",
                                             "print_timestamps",
                                             "accuracy_log_rng_seed",
                                             "accuracy_log_sampling_target",
                                             "target_duration"};
  return keys;
}

bool is_seed_key(const std::string& key) {
  return key == "qsl_rng_seed" || key == "sample_index_rng_seed" || key == "schedule_rng_seed" ||
         key == "accuracy_log_probability" || key.rfind("test05", 0) == 0;
}

// One lookup of TestSettings::FromConfig's: a key under the run's scenario or a fixed one.
struct ConfReader {
  const ConfFile& conf;
  const std::string& model;
  const std::string scenario;

  const ConfValue* find(const char* key, const char* fixed_scenario = nullptr) const {
    return conf.lookup(model, fixed_scenario ? fixed_scenario : scenario, key);
  }
  void u64(const char* key, uint64_t& out, uint64_t multiplier = 1, const char* fixed_scenario = nullptr) const {
    if (const ConfValue* v = find(key, fixed_scenario)) out = conf_value_u64(*v, multiplier);
  }
  void f64(const char* key, double& out, double multiplier = 1, const char* fixed_scenario = nullptr) const {
    if (const ConfValue* v = find(key, fixed_scenario)) out = conf_value_f64(*v, multiplier);
  }
  // LoadGen reads some flags as `value == 1` and others as `value != 0`; `one_means_true` picks which.
  void flag(const char* key, bool& out, bool one_means_true, const char* fixed_scenario = nullptr) const {
    if (const ConfValue* v = find(key, fixed_scenario)) {
      const uint64_t value = conf_value_u64(*v);
      out = one_means_true ? value == 1 : value != 0;
    }
  }
  void refuse_if_set(const char* key, const char* why) const {
    if (const ConfValue* v = find(key)) MOESERVE_CHECK(conf_value_u64(*v) == 0, "{}: {} {}", v->origin, key, why);
  }
};

}  // namespace

void apply_conf(const ConfFile& conf, const std::string& model, Scenario scenario, ConfRole role, TestSettings& s) {
  for (const auto& [full_key, value] : conf.entries()) {
    const std::string key = full_key.substr(full_key.rfind('.') + 1);
    MOESERVE_CHECK(known_keys().count(key), "{}: unknown setting '{}' (LoadGen would silently ignore it)", value.origin,
                   key);
    MOESERVE_CHECK(role == ConfRole::mlperf_conf || !is_seed_key(key),
                   "{}: LoadGen reads {} only from mlperf.conf and ignores it in a user.conf; use --mlperf-conf or "
                   "the flag",
                   value.origin, key);
  }
  const ConfReader r{conf, model, scenario_name(scenario)};
  // The order of TestSettings::FromConfig (test_settings_internal.cc).
  if (const ConfValue* v = r.find("mode")) {
    const uint64_t mode = conf_value_u64(*v);
    MOESERVE_CHECK(mode == 1 || mode == 2, "{}: mode {} is not supported (1: accuracy, 2: performance)", v->origin,
                   mode);
    s.mode = mode == 1 ? TestMode::accuracy_only : TestMode::performance_only;
  }
  if (role == ConfRole::mlperf_conf) {
    r.u64("qsl_rng_seed", s.qsl_rng_seed);
    r.u64("sample_index_rng_seed", s.sample_index_rng_seed);
    r.u64("schedule_rng_seed", s.schedule_rng_seed);
    r.f64("accuracy_log_probability", s.accuracy_log_probability, 0.01);
    r.refuse_if_set("test05", "(the TEST05 seeds) is not supported; it is not used since v5.0");
  }
  r.flag("use_token_latencies", s.use_token_latencies, true);
  if (s.use_token_latencies) {
    r.u64("ttft_latency", s.server_ttft_latency, 1000 * 1000, "Server");
    r.u64("tpot_latency", s.server_tpot_latency, 1000 * 1000, "Server");
  }
  r.refuse_if_set("infer_token_latencies", "is not supported: our SUTs report every token");
  r.f64("target_latency_percentile", s.single_stream_target_latency_percentile, 0.01, "SingleStream");
  r.f64("target_latency_percentile", s.server_target_latency_percentile, 0.01, "Server");
  r.u64("target_latency", s.server_target_latency_ns, 1000 * 1000, "Server");
  r.flag("performance_issue_unique", s.performance_issue_unique, false);
  r.flag("performance_issue_same", s.performance_issue_same, false);
  r.u64("performance_issue_same_index", s.performance_issue_same_index);
  r.flag("sample_concatenate_permutation", s.sample_concatenate_permutation, true);
  r.flag("coalesce_queries", s.server_coalesce_queries, false, "Server");
  r.u64("max_async_queries", s.server_max_async_queries, 1, "Server");
  r.u64("min_duration", s.min_duration_ms);
  r.u64("max_duration", s.max_duration_ms);
  r.u64("min_query_count", s.min_query_count);
  r.u64("max_query_count", s.max_query_count);
  r.u64("performance_sample_count_override", s.performance_sample_count_override);
  r.u64("accuracy_sample_count_override", s.accuracy_sample_count_override);
  r.f64("target_latency", s.single_stream_expected_latency_ns, 1000 * 1000, "SingleStream");
  r.f64("target_qps", s.server_target_qps, 1, "Server");
  r.f64("target_qps", s.offline_expected_qps, 1, "Offline");
  r.u64("accuracy_log_rng_seed", s.accuracy_log_rng_seed);
  r.u64("accuracy_log_sampling_target", s.accuracy_log_sampling_target);
}

EffectiveSettings effective_settings(const TestSettings& requested, uint64_t qsl_performance_sample_count,
                                     uint64_t qsl_total_sample_count) {
  // TestSettingsInternal's constructor (test_settings_internal.cc).
  EffectiveSettings e;
  e.requested = requested;
  e.scenario = requested.scenario;
  e.mode = requested.mode;
  e.target_duration_ms = static_cast<int64_t>(requested.min_duration_ms);
  e.min_duration_ms = static_cast<int64_t>(requested.min_duration_ms);
  e.max_duration_ms = static_cast<int64_t>(requested.max_duration_ms);
  e.min_query_count = requested.min_query_count;
  e.max_query_count = requested.max_query_count;
  switch (requested.scenario) {
    case Scenario::single_stream:
      e.target_qps = 1e9 / requested.single_stream_expected_latency_ns;
      e.max_async_queries = 1;
      e.target_latency_percentile = requested.single_stream_target_latency_percentile;
      break;
    case Scenario::server:
      MOESERVE_CHECK(requested.server_target_qps > 0, "target_qps must be positive (got {})",
                     requested.server_target_qps);
      e.target_qps = requested.server_target_qps;
      e.target_latency_ns = static_cast<int64_t>(requested.server_target_latency_ns);
      e.target_latency_percentile = requested.server_target_latency_percentile;
      e.max_async_queries = requested.server_max_async_queries;
      break;
    case Scenario::offline:
      MOESERVE_CHECK(requested.offline_expected_qps > 0, "target_qps must be positive (got {})",
                     requested.offline_expected_qps);
      e.target_latency_percentile = 0.99;
      e.target_qps = requested.offline_expected_qps;
      e.max_async_queries = 1;
      break;
  }
  e.performance_sample_count = requested.performance_sample_count_override == 0
                                   ? qsl_performance_sample_count
                                   : requested.performance_sample_count_override;
  e.accuracy_sample_count =
      requested.accuracy_sample_count_override == 0 ? qsl_total_sample_count : requested.accuracy_sample_count_override;
  if (requested.scenario == Scenario::offline) {
    // kSlack: generate 10% more samples than min_duration needs at the expected rate.
    constexpr double kSlack = 1.1;
    const auto target_sample_count =
        static_cast<uint64_t>(kSlack * (static_cast<double>(e.target_duration_ms) / 1000.0) * e.target_qps);
    e.samples_per_query = requested.performance_issue_unique
                              ? e.performance_sample_count
                              : std::max<uint64_t>(e.min_query_count, target_sample_count);
    e.min_query_count = 1;
    e.target_duration_ms = 0;
  }
  if (requested.sample_concatenate_permutation && requested.scenario == Scenario::single_stream) {
    // LoadGen pads SingleStream to a multiple of the QSL's performance count (not the override), with slack 2,
    // and adds a whole set even when already a multiple.
    constexpr double kSlack = 2.0;
    const auto expected_queries =
        static_cast<uint64_t>(kSlack * (static_cast<double>(e.target_duration_ms) / 1000.0) * e.target_qps);
    e.min_query_count = std::max(e.min_query_count, expected_queries);
    e.min_query_count += qsl_performance_sample_count - (e.min_query_count % qsl_performance_sample_count);
  }
  e.min_sample_count = e.min_query_count * e.samples_per_query;
  MOESERVE_CHECK(!(requested.performance_issue_same && requested.performance_issue_unique),
                 "performance_issue_unique and performance_issue_same cannot both be set");
  MOESERVE_CHECK(
      !requested.performance_issue_same || requested.performance_issue_same_index < e.performance_sample_count,
      "performance_issue_same_index {} must be below the performance sample count {}",
      requested.performance_issue_same_index, e.performance_sample_count);
  return e;
}

}  // namespace moeserve::bench
