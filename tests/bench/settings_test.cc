// Bench settings: conf-file syntax and errors, LoadGen's lookup order and units, the built-in definitions against
// LoadGen's own mlperf.conf, and the effective settings LoadGen derives.
#include "bench/settings.h"

#include <gtest/gtest.h>

#include "bench_test_util.h"
#include "util/error.h"

namespace moeserve::bench {
namespace {

using testing::error_of;

// LoadGen's own mlperf.conf, the lines for our models (tests/fixtures/loadgen/SOURCE.md).
const std::string kLoadGenMlperfConf = MOESERVE_SOURCE_DIR "/tests/fixtures/loadgen/mlperf.conf";

TestSettings settings_for(const std::string& model, Scenario scenario, const std::string& user_conf = "") {
  TestSettings s;
  s.scenario = scenario;
  apply_conf(ConfFile::parse(kBuiltinMlperfConf, "built-in"), model, scenario, ConfRole::mlperf_conf, s);
  if (!user_conf.empty()) apply_conf(ConfFile::parse(user_conf, "user.conf"), model, scenario, ConfRole::user_conf, s);
  return s;
}

TEST(ConfFile, LookupOrderIsExactThenWildcardModelThenWildcardScenario) {
  ConfFile conf = ConfFile::parse(
      "*.*.min_query_count = 1\n"
      "m.*.min_query_count = 2\n"
      "*.Server.min_query_count = 3\n"
      "m.Server.min_query_count = 4\n",
      "t.conf");
  EXPECT_EQ(conf.lookup("m", "Server", "min_query_count")->text, "4");
  EXPECT_EQ(conf.lookup("other", "Server", "min_query_count")->text, "3");
  EXPECT_EQ(conf.lookup("m", "Offline", "min_query_count")->text, "2");
  EXPECT_EQ(conf.lookup("other", "Offline", "min_query_count")->text, "1");
  EXPECT_EQ(conf.lookup("m", "Server", "min_duration"), nullptr);
  EXPECT_EQ(conf.lookup("m", "Server", "min_query_count")->origin, "t.conf:4");
}

TEST(ConfFile, BadLinesNameFileAndLine) {
  EXPECT_NE(error_of([] { ConfFile::parse("# ok\nm.Server.target_qps=5\n", "u.conf"); }).find("u.conf:2"),
            std::string::npos);
  EXPECT_NE(error_of([] { ConfFile::parse("\nm.Server.target_qps = fast\n", "u.conf"); }).find("u.conf:2: value"),
            std::string::npos);
  EXPECT_NE(error_of([] { ConfFile::parse("m.Srever.target_qps = 5\n", "u.conf"); }).find("scenario 'Srever'"),
            std::string::npos);
  EXPECT_NE(error_of([] { ConfFile::parse("target_qps = 5\n", "u.conf"); }).find("model.Scenario.key"),
            std::string::npos);
  EXPECT_NE(error_of([] { ConfFile::parse("m.Server.target_qps = 5 # comment\n", "u.conf"); }).find("u.conf:1"),
            std::string::npos);
  // Unknown keys and seeds in a user.conf are refused where LoadGen would silently ignore them.
  EXPECT_NE(error_of([] {
              settings_for("gpt-oss-120b", Scenario::server, "\n*.*.target_qsp = 3\n");
            }).find("user.conf:2: unknown setting 'target_qsp'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              settings_for("gpt-oss-120b", Scenario::server, "*.*.schedule_rng_seed = 3\n");
            }).find("user.conf:1: LoadGen reads schedule_rng_seed only from mlperf.conf"),
            std::string::npos);
}

TEST(Settings, BuiltInDefinitionsAgreeWithLoadGensMlperfConf) {
  const ConfFile loadgen = ConfFile::read(kLoadGenMlperfConf);
  for (const std::string model :
       {"gpt-oss-120b", "gpt-oss-120b-interactive", "deepseek-r1", "deepseek-r1-interactive"}) {
    for (Scenario scenario : {Scenario::single_stream, Scenario::server, Scenario::offline}) {
      TestSettings builtin = settings_for(model, scenario);
      TestSettings from_file;
      from_file.scenario = scenario;
      apply_conf(loadgen, model, scenario, ConfRole::mlperf_conf, from_file);
      SCOPED_TRACE(model + " " + scenario_name(scenario));
      EXPECT_EQ(builtin.performance_sample_count_override, from_file.performance_sample_count_override);
      EXPECT_EQ(builtin.accuracy_sample_count_override, from_file.accuracy_sample_count_override);
      EXPECT_EQ(builtin.sample_concatenate_permutation, from_file.sample_concatenate_permutation);
      EXPECT_EQ(builtin.use_token_latencies, from_file.use_token_latencies);
      EXPECT_EQ(builtin.server_ttft_latency, from_file.server_ttft_latency);
      EXPECT_EQ(builtin.server_tpot_latency, from_file.server_tpot_latency);
      EXPECT_EQ(builtin.server_target_latency_ns, from_file.server_target_latency_ns);
      EXPECT_EQ(builtin.server_target_latency_percentile, from_file.server_target_latency_percentile);
      EXPECT_EQ(builtin.single_stream_target_latency_percentile, from_file.single_stream_target_latency_percentile);
      EXPECT_EQ(builtin.single_stream_expected_latency_ns, from_file.single_stream_expected_latency_ns);
      EXPECT_EQ(builtin.min_duration_ms, from_file.min_duration_ms);
      EXPECT_EQ(builtin.min_query_count, from_file.min_query_count);
      EXPECT_EQ(builtin.server_target_qps, from_file.server_target_qps);
      EXPECT_EQ(builtin.offline_expected_qps, from_file.offline_expected_qps);
      EXPECT_EQ(builtin.qsl_rng_seed, from_file.qsl_rng_seed);
      EXPECT_EQ(builtin.sample_index_rng_seed, from_file.sample_index_rng_seed);
      EXPECT_EQ(builtin.schedule_rng_seed, from_file.schedule_rng_seed);
    }
  }
}

TEST(Settings, PerBenchmarkLimitsAndCounts) {
  TestSettings gpt = settings_for("gpt-oss-120b", Scenario::server);
  EXPECT_EQ(gpt.server_ttft_latency, 3000000000u);
  EXPECT_EQ(gpt.server_tpot_latency, 80000000u);
  EXPECT_EQ(gpt.performance_sample_count_override, 6396u);
  EXPECT_EQ(gpt.accuracy_sample_count_override, 4395u);
  EXPECT_EQ(gpt.min_duration_ms, 600000u);
  EXPECT_EQ(gpt.min_query_count, 100u);
  EXPECT_TRUE(gpt.sample_concatenate_permutation);
  EXPECT_DOUBLE_EQ(gpt.server_target_latency_percentile, 0.99);
  TestSettings gpt_interactive = settings_for("gpt-oss-120b-interactive", Scenario::server);
  EXPECT_EQ(gpt_interactive.server_ttft_latency, 2000000000u);
  EXPECT_EQ(gpt_interactive.server_tpot_latency, 15000000u);
  TestSettings ds = settings_for("deepseek-r1", Scenario::offline);
  EXPECT_EQ(ds.min_query_count, 4388u);
  EXPECT_EQ(ds.performance_sample_count_override, 4388u);
  TestSettings ds_interactive = settings_for("deepseek-r1-interactive", Scenario::server);
  EXPECT_EQ(ds_interactive.server_ttft_latency, 1500000000u);
  EXPECT_EQ(ds_interactive.server_tpot_latency, 15000000u);
  EXPECT_EQ(ds_interactive.qsl_rng_seed, round_seeds("v6.1").qsl_rng_seed);
  EXPECT_EQ(round_seeds("v6.0").schedule_rng_seed, 3936089224930324775ULL);

  EXPECT_EQ(benchmark_definition("gpt-oss-120b").max_output_tokens_performance, 10240);
  EXPECT_EQ(benchmark_definition("gpt-oss-120b").max_output_tokens_accuracy, 32768);
  EXPECT_FLOAT_EQ(benchmark_definition("gpt-oss-120b").sampling.temperature, 1.0f);
  EXPECT_EQ(benchmark_definition("deepseek-r1").max_output_tokens_performance, 20000);
  EXPECT_TRUE(benchmark_definition("deepseek-r1").sampling.greedy());
}

TEST(Settings, UserConfOverridesWithLoadGensUnits) {
  TestSettings s = settings_for("gpt-oss-120b", Scenario::server,
                                "gpt-oss-120b.Server.target_qps = 2.5\n"
                                "gpt-oss-120b.*.min_duration = 10000\n"
                                "*.Server.ttft_latency = 2.9\n"  // strtoull: 2 ms, as LoadGen reads it
                                "gpt-oss-120b.Server.tpot_latency = 70\n"
                                "gpt-oss-120b.Server.target_latency_percentile = 90\n");
  EXPECT_DOUBLE_EQ(s.server_target_qps, 2.5);
  EXPECT_EQ(s.min_duration_ms, 10000u);
  EXPECT_EQ(s.server_tpot_latency, 70000000u);
  EXPECT_DOUBLE_EQ(s.server_target_latency_percentile, 0.9);
  // gpt-oss-120b.Server.ttft_latency (mlperf.conf) is found before *.Server.ttft_latency in the same file only;
  // across files the later file wins whatever its specificity.
  EXPECT_EQ(s.server_ttft_latency, 2000000u);
}

TEST(Settings, EffectiveOfflineAndEqualIssueSingleStream) {
  TestSettings offline = settings_for("gpt-oss-120b", Scenario::offline,
                                      "gpt-oss-120b.Offline.target_qps = 20\ngpt-oss-120b.*.min_duration = 10000\n");
  EffectiveSettings e = effective_settings(offline, 6396, 6396);
  EXPECT_EQ(e.samples_per_query, 220u);  // max(100, 1.1 * 10 s * 20/s)
  EXPECT_EQ(e.min_query_count, 1u);
  EXPECT_EQ(e.target_duration_ms, 0);
  EXPECT_EQ(e.performance_sample_count, 6396u);
  TestSettings single = settings_for("gpt-oss-120b", Scenario::single_stream,
                                     "gpt-oss-120b.SingleStream.target_latency = 500\n"
                                     "gpt-oss-120b.*.min_duration = 10000\n");
  EffectiveSettings s = effective_settings(single, 300, 300);
  EXPECT_DOUBLE_EQ(s.target_qps, 2.0);
  EXPECT_EQ(s.min_query_count, 300u);  // max(100, 2 * 10 s * 2/s) padded by a whole QSL: 100 + (300 - 100)
}

}  // namespace
}  // namespace moeserve::bench
