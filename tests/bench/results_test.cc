// Percentiles, early stopping and VALID/INVALID against hand-computed cases and against values LoadGen 6.0.17
// itself printed for the same inputs (its MinPassingQueriesFinder and PerformanceSummary::EarlyStopping, run
// through a local harness that is not part of moeserve).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/mlperf_log.h"
#include "bench/verdict.h"

namespace moeserve::bench {
namespace {

TEST(EarlyStopping, MinPassingCountsMatchLoadGen) {
  // LoadGen: MinPassingQueriesFinder()(t, 0.99, 0, 0.99) with a fresh finder for each t.
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 459},   {1, 661},   {2, 836},    {5, 1302},
                                                             {10, 2000}, {50, 6848}, {100, 12471}};
  for (auto [t, h] : expected) EXPECT_EQ(MinPassingQueriesFinder()(t, 0.99, 0.0, 0.99), h) << "t=" << t;
  // t = 0 by hand: the smallest h with 0.99^h < 0.01 is 459 (0.99^458 = 0.01005, 0.99^459 = 0.00995).
  EXPECT_LT(early_stopping_odds(459, 0, 0.99, 0.0), 0.01);
  EXPECT_GT(early_stopping_odds(458, 0, 0.99, 0.0), 0.01);
}

std::vector<int64_t> one_to(int n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 1);
  return v;
}

TEST(EarlyStopping, ServerTextsMatchLoadGen) {
  // 1..n with the bound at n - 3: three samples over it, so h + t = 998 + 3 (LoadGen: "1 more" at n = 1000).
  EarlyStoppingResult r = early_stopping(Scenario::server, 1000, one_to(1000), 997, 0.99);
  EXPECT_FALSE(r.met);
  EXPECT_EQ(r.recommendation,
            " * Run unsuccessful.\n * Processed 1000 queries.\n * Would need to run at least 1 more queries,\n"
            " with the run being successful if every additional\n query were under latency.");
  r = early_stopping(Scenario::server, 1001, one_to(1001), 998, 0.99);
  EXPECT_TRUE(r.met);
  EXPECT_EQ(r.recommendation, " * Run successful.");
  EXPECT_EQ(early_stopping(Scenario::server, 458, one_to(458), 1000, 0.99).met, false);  // t = 0 needs 459
  EXPECT_EQ(early_stopping(Scenario::server, 459, one_to(459), 1000, 0.99).met, true);
}

TEST(EarlyStopping, SingleStreamTextsMatchLoadGen) {
  EarlyStoppingResult r = early_stopping(Scenario::single_stream, 30, one_to(30), 0, 0.9);
  EXPECT_FALSE(r.met);
  EXPECT_EQ(r.recommendation,
            " * Only processed 30 queries.\n * Need to process at least 64 queries for early stopping.");
  r = early_stopping(Scenario::single_stream, 300, one_to(300), 0, 0.9);
  EXPECT_TRUE(r.met);
  EXPECT_EQ(r.latency_estimate_ss, 283);
  EXPECT_EQ(r.recommendation,
            " * Processed at least 64 queries (300).\n * Would discard 17 highest latency queries.\n"
            " * Early stopping 90.0th percentile estimate: 283\n * Not enough queries processed for 99.0th "
            "percentile\n early stopping estimate (would need to process at\n least 662 total queries).");
  r = early_stopping(Scenario::single_stream, 1000, one_to(1000), 0, 0.9);
  EXPECT_EQ(r.latency_estimate_ss, 923);
  EXPECT_EQ(r.latency_estimate_ms, 999);
  EXPECT_EQ(r.recommendation,
            " * Processed at least 64 queries (1000).\n * Would discard 77 highest latency queries.\n"
            " * Early stopping 90.0th percentile estimate: 923\n * Early stopping 99.0th percentile estimate: 999");
}

TEST(LatencyStats, PercentilesIndexTheSortedArrayWithoutInterpolation) {
  // 1..1000: index size_t(1000 * p) -> 501 (p50), 901, 951, 971, 991, 1000 (p99.9 -> index 999).
  LatencyStats s = latency_stats(one_to(1000), 0.99, 1000);
  EXPECT_EQ(s.percentiles, (std::array<int64_t, 6>{501, 901, 951, 971, 991, 1000}));
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 1000);
  EXPECT_EQ(s.mean, 500);  // 500500 / 1000 in integer ns
  EXPECT_EQ(s.at_target, 991);
  // 256 samples: p99 is index 253 (253.44 truncated).
  EXPECT_EQ(latency_stats(one_to(256), 0.99, 256).at_target, 254);
}

TEST(LatencyStats, TpotIsLatencyAfterTheFirstTokenOverTheRemainingTokens) {
  EXPECT_EQ(time_per_output_token_ns(1'000'000'000, 100'000'000, 10), 100'000'000);
  EXPECT_EQ(time_per_output_token_ns(1'000, 100, 4), 300);
  EXPECT_EQ(time_per_output_token_ns(1'001, 0, 3), 500);  // integer ns
  // LoadGen records a one-token sample with 0 tokens and divides by -1.
  EXPECT_EQ(recorded_token_count(1), 0);
  EXPECT_EQ(time_per_output_token_ns(1'000, 100, 1), -900);
}

// A Server run with token latencies: n samples, `over_ttft` of them over the TTFT bound, `over_tpot` over TPOT.
PerformanceResult server_result(int n, int over_ttft, int over_tpot, double last_scheduled_s) {
  PerformanceResult r;
  for (int i = 0; i < n; ++i) {
    r.first_token_latencies.push_back(i < over_ttft ? 3'500'000'000 : 500'000'000);
    r.time_per_output_token.push_back(i < over_tpot ? 90'000'000 : 20'000'000);
    r.sample_latencies.push_back(10'000'000'000);
    r.tokens_per_sample.push_back(100);
  }
  r.queries_issued = n;
  r.final_query_scheduled_time = last_scheduled_s;
  r.final_query_issued_time = last_scheduled_s;
  r.final_query_all_samples_done_time = last_scheduled_s + 10;
  r.max_latency = 10;
  return r;
}

EffectiveSettings gpt_oss_server() {
  TestSettings s;
  s.scenario = Scenario::server;
  apply_conf(ConfFile::parse(kBuiltinMlperfConf, "built-in"), "gpt-oss-120b", Scenario::server, ConfRole::mlperf_conf,
             s);
  return effective_settings(s, 6396, 6396);  // TTFT 3 s, TPOT 80 ms at p99, min 600 s and 100 queries
}

TEST(Verdict, ValidServerRun) {
  const EffectiveSettings e = gpt_oss_server();
  const PerformanceSummary s = summarize(server_result(1000, 0, 0, 600.5), e);
  EXPECT_EQ(s.token_count, 100000u);
  EXPECT_DOUBLE_EQ(s.completed_tokens_per_second(), 100000 / 610.5);
  const Verdict v = judge(s, e);
  EXPECT_TRUE(v.valid);
  EXPECT_TRUE(v.reasons.empty());
  EXPECT_EQ(v.early_stopping_ttft.recommendation, " * Run successful.");
  EXPECT_EQ(v.early_stopping_tpot.recommendation, " * Run successful.");
}

TEST(Verdict, EveryReasonIsListed) {
  const EffectiveSettings e = gpt_oss_server();
  // 50 samples, 20 over TTFT (p99 = index 49: over), 10 over TPOT, last query at 100 s.
  const PerformanceSummary s = summarize(server_result(50, 20, 10, 100), e);
  const Verdict v = judge(s, e);
  EXPECT_FALSE(v.valid);
  EXPECT_FALSE(v.min_duration_met);
  EXPECT_FALSE(v.min_queries_met);
  EXPECT_FALSE(v.perf_constraints_met);
  EXPECT_FALSE(v.early_stopping_met);
  EXPECT_EQ(v.perf_constraints_recommendation,
            "TTFT constrain not met: Reduce target QPS to improve latency.\n"
            " * TPOT constrain not met: Reduce target QPS to improve latency.");
  EXPECT_EQ(v.min_duration_recommendation, "Increase the target QPS so the loadgen pre-generates more queries.");
  // TPOT early stopping fails (t = 10 needs 2000 + 10), so LoadGen never evaluates TTFT's.
  EXPECT_EQ(v.early_stopping_tpot.recommendation,
            " * Run unsuccessful.\n * Processed 50 queries.\n * Would need to run at least 1960 more queries,\n"
            " with the run being successful if every additional\n query were under latency.");
  EXPECT_EQ(v.early_stopping_ttft.recommendation, "");
  ASSERT_EQ(v.reasons.size(), 5u);
  EXPECT_EQ(v.reasons[0], "min duration not met: the last query was scheduled at 100.000 s, under 600.000 s");
  EXPECT_EQ(v.reasons[1], "min queries not met: 50 queries (50 samples) issued, 100 (100) required");
  EXPECT_NE(v.reasons[2].find("TPOT early stopping not met"), std::string::npos);
  EXPECT_EQ(v.reasons[3], "p99 TTFT 3500.000 ms is over the 3000.000 ms bound");
  EXPECT_EQ(v.reasons[4], "p99 TPOT 90.000 ms is over the 80.000 ms bound");
}

TEST(Verdict, OfflineNeedsOnlyDurationAndSamples) {
  TestSettings t;
  t.scenario = Scenario::offline;
  t.min_duration_ms = 10000;
  t.use_token_latencies = true;
  const EffectiveSettings e = effective_settings(t, 64, 64);
  PerformanceResult r;
  r.sample_latencies = {9'000'000'000, 10'500'000'000};
  r.tokens_per_sample = {7, 3};
  r.queries_issued = 1;
  r.max_latency = 10.5;
  const PerformanceSummary s = summarize(r, e);
  EXPECT_DOUBLE_EQ(s.tokens_per_second(), 10 / 10.5);
  EXPECT_DOUBLE_EQ(s.samples_per_second(), 2 / 10.5);
  const Verdict v = judge(s, e);
  EXPECT_TRUE(v.min_duration_met);
  EXPECT_FALSE(v.min_queries_met);  // min_sample_count = 100 samples (LoadGen's default min_query_count)
  EXPECT_TRUE(v.early_stopping_met);
  EXPECT_FALSE(v.valid);
}

TEST(DetailLog, MetadataNamesTheCallersFileAndLineAsLoadGenDoes) {
  const auto path = std::filesystem::temp_directory_path() / "moeserve_detail_log_test.txt";
  unsigned line = 0;
  {
    DetailLog log(path.string(), std::chrono::steady_clock::now());
    line = __LINE__ + 1;
    log.log("effective_scenario", "Offline");
    log.error("error_invalid_config", "bad");
    EXPECT_EQ(log.error_count(), 1);
  }
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  std::filesystem::remove(path);
  ASSERT_EQ(first.rfind(":::MLLOG ", 0), 0u) << first;
  const auto a = nlohmann::json::parse(first.substr(9));
  const auto b = nlohmann::json::parse(second.substr(9));
  EXPECT_EQ(a["key"], "effective_scenario");
  EXPECT_EQ(a["value"], "Offline");
  EXPECT_EQ(a["metadata"]["file"], "results_test.cc");
  EXPECT_EQ(a["metadata"]["line_no"], line);
  EXPECT_EQ(b["metadata"]["line_no"], line + 1);
  EXPECT_EQ(b["metadata"]["is_error"], true);
  EXPECT_EQ(a["metadata"]["is_error"], false);
}

}  // namespace
}  // namespace moeserve::bench
