// The bench's settings: LoadGen's TestSettings (test_settings.h in mlcommons/inference loadgen, 6.0.17), the
// effective settings LoadGen derives from them (test_settings_internal.cc), and the per-benchmark definitions
// (max output tokens, sampling) that LoadGen leaves to the harness.
//
// Where settings come from, in order (each later source overrides the earlier ones):
//   1. the defaults below (LoadGen's);
//   2. the built-in mlperf.conf subset for our four models (kBuiltinMlperfConf, which agrees with LoadGen's
//      mlperf.conf; a test checks it), or the file given with --mlperf-conf in its place;
//   3. user.conf (--user-conf), read as LoadGen reads a user.conf: the RNG seeds are only taken from mlperf.conf;
//   4. command-line flags, one per setting.
// A model name in a conf file is LoadGen's: gpt-oss-120b, gpt-oss-120b-interactive, deepseek-r1,
// deepseek-r1-interactive. Interactive runs LoadGen's Server scenario under the "-interactive" model name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/conf_file.h"
#include "sampling/sampling_params.h"

namespace moeserve::bench {

enum class Scenario { single_stream, server, offline };
enum class TestMode { accuracy_only, performance_only };

// LoadGen's name for a scenario, as conf files and logs spell it ("SingleStream", "Server", "Offline").
const char* scenario_name(Scenario scenario);
const char* test_mode_name(TestMode mode);  // "AccuracyOnly", "PerformanceOnly"

// The settings a run asks for; LoadGen's TestSettings field by field (its names, its defaults, its units).
struct TestSettings {
  Scenario scenario = Scenario::single_stream;
  TestMode mode = TestMode::performance_only;

  // SingleStream: the latency the SUT is expected to have (ns); sets the query period used to pre-generate
  // enough queries (target_qps = 1e9 / this). Conf key SingleStream.target_latency, in ms.
  double single_stream_expected_latency_ns = 1000000;
  // SingleStream: the latency percentile reported as the result. Conf key target_latency_percentile, in %.
  double single_stream_target_latency_percentile = 0.90;

  // Server: the mean rate of the Poisson arrival process (queries per second). Conf key Server.target_qps.
  double server_target_qps = 1;
  // Server: the latency bound for models that do not use token latencies (ns); our LLMs set it to 0 and are
  // judged on TTFT and TPOT instead. Conf key Server.target_latency, in ms.
  uint64_t server_target_latency_ns = 100000000;
  // Server: the percentile at which latency, TTFT and TPOT must meet their bounds. Conf key in %.
  double server_target_latency_percentile = 0.99;
  // Server: LoadGen may merge queries whose scheduled times have all passed into one IssueQuery call. Every
  // sample keeps its own scheduled time either way; our issuer always issues every past-due sample at once.
  bool server_coalesce_queries = false;
  // Server: stop issuing when more than this many queries are outstanding (0: no limit).
  uint64_t server_max_async_queries = 0;

  // Offline: the expected throughput (samples per second); the single query holds
  // max(min_query_count, 1.1 * min_duration * this) samples. Conf key Offline.target_qps.
  double offline_expected_qps = 1;
  // Equal-issue mode: issue whole permutations of the performance sample set, padding the query count (Server,
  // SingleStream) or the Offline query up to a multiple of the set. Required for closed-division LLMs.
  bool sample_concatenate_permutation = false;

  // The test runs until both min duration and min query count are met; it stops early if either max is reached
  // (0: no limit). Durations in ms, as in conf files.
  uint64_t min_duration_ms = 10000;
  uint64_t max_duration_ms = 0;
  uint64_t min_query_count = 100;
  uint64_t max_query_count = 0;

  // Seeds: which samples form the performance set (qsl), which samples the queries carry (sample_index), the
  // Server arrival times (schedule), and which responses performance mode logs for accuracy (accuracy_log).
  // mlperf.conf sets the first three per round; user.conf cannot change them.
  uint64_t qsl_rng_seed = 0;
  uint64_t sample_index_rng_seed = 0;
  uint64_t schedule_rng_seed = 0;
  uint64_t accuracy_log_rng_seed = 0;
  // Performance mode: the fraction of responses written to the accuracy log (conf value in %).
  double accuracy_log_probability = 0.0;
  // Performance mode: aim for about this many accuracy-log entries (compliance tests); overrides the probability.
  uint64_t accuracy_log_sampling_target = 0;

  // Audit modifiers: issue every loaded sample exactly once, or one sample (performance_issue_same_index) always.
  bool performance_issue_unique = false;
  bool performance_issue_same = false;
  uint64_t performance_issue_same_index = 0;
  // The performance sample set's size (0: the dataset's size, which is what our QSL reports).
  uint64_t performance_sample_count_override = 0;
  // Accuracy mode issues samples [0, this) (0: the whole dataset); capped at the dataset size.
  uint64_t accuracy_sample_count_override = 0;

  // Token latencies: TTFT and TPOT are measured and bounded (ns; conf keys Server.ttft_latency/tpot_latency in ms).
  bool use_token_latencies = false;
  uint64_t server_ttft_latency = 100000000;
  uint64_t server_tpot_latency = 100000000;
};

// What LoadGen leaves to the benchmark's harness, per benchmark (the MLPerf reference implementations).
struct BenchmarkDefinition {
  std::string name;                       // --benchmark: gpt-oss-120b or deepseek-r1
  int max_output_tokens_performance = 0;  // max new tokens per sample in performance mode
  int max_output_tokens_accuracy = 0;     // ... and in accuracy mode
  SamplingParams sampling;                // the reference's generation config
};

// gpt-oss-120b: generation_config.json (temperature 1, top_p 1, top_k off), 10,240 new tokens in performance
// runs (README; the rules text says 10,000) and 32,768 in accuracy runs. deepseek-r1: greedy, 20,000.
const BenchmarkDefinition& benchmark_definition(std::string_view name);
std::vector<std::string> benchmark_names();

// LoadGen's model name for a benchmark and scenario: "<benchmark>-interactive" for Interactive.
std::string loadgen_model_name(const std::string& benchmark, bool interactive);

// The mlperf.conf lines for our four models (LoadGen's mlperf.conf, 6.0.17, with the v6.1 seeds).
extern const char* const kBuiltinMlperfConf;
// The RNG seeds of a round: "v6.0" or "v6.1".
struct RoundSeeds {
  uint64_t qsl_rng_seed, sample_index_rng_seed, schedule_rng_seed;
};
RoundSeeds round_seeds(std::string_view round);

// How a conf file is read: as mlperf.conf (the seeds and accuracy_log_probability are read too) or as user.conf.
enum class ConfRole { mlperf_conf, user_conf };

// Applies a conf file's settings for this model and scenario as TestSettings::FromConfig does. Fails naming
// file:line for keys LoadGen does not know, and for seed keys in a user.conf (LoadGen silently ignores those).
void apply_conf(const ConfFile& conf, const std::string& model, Scenario scenario, ConfRole role,
                TestSettings& settings);

// The settings LoadGen derives for a run (TestSettingsInternal), given what the QSL reports: our QSL reports the
// dataset size as both its total and its performance sample count, as the MLPerf reference harness does.
struct EffectiveSettings {
  TestSettings requested;
  Scenario scenario = Scenario::single_stream;
  TestMode mode = TestMode::performance_only;
  uint64_t samples_per_query = 1;
  double target_qps = 1;
  int64_t target_latency_ns = 0;
  double target_latency_percentile = 0.99;
  uint64_t max_async_queries = 0;
  int64_t target_duration_ms = 0;  // how long the generated schedule must run (0 for Offline)
  int64_t min_duration_ms = 0;
  int64_t max_duration_ms = 0;
  uint64_t min_query_count = 0;
  uint64_t max_query_count = 0;
  uint64_t min_sample_count = 0;
  uint64_t performance_sample_count = 0;
  uint64_t accuracy_sample_count = 0;
};
EffectiveSettings effective_settings(const TestSettings& requested, uint64_t qsl_performance_sample_count,
                                     uint64_t qsl_total_sample_count);

}  // namespace moeserve::bench
