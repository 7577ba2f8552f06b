// bench compare: the ratio of every metric to the first run, better or worse by the metric's direction, and the
// settings in which the runs differ said up front.
#include "bench/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "report_runs.h"

namespace moeserve::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

nlohmann::json server_result(double tokens_per_second, double p99_ttft_ms, double target_qps) {
  return {{"format", "moeserve-bench-result/1"},
          {"validity", "VALID"},
          {"scenario", "Server"},
          {"sut_name", "moeserve-inprocess"},
          {"samples_failed", 0},
          {"settings", {{"effective", {{"target_qps", target_qps}}}}},
          {"result",
           {{"completed_tokens_per_second", tokens_per_second},
            {"ttft_ns", {{"p50", p99_ttft_ms * 5e5}, {"p99", p99_ttft_ms * 1e6}}}}}};
}

TEST(Compare, RatiosToTheFirstRunWithTheirDirection) {
  const std::vector<ComparedRun> runs = {{"a.json", server_result(100, 200, 6)},
                                         {"b.json", server_result(250, 100, 6)},
                                         {"c.json", server_result(50, 400, 6)}};
  const std::vector<ComparedMetric> metrics = compared_metrics(runs);
  auto metric = [&](const std::string& name) {
    for (const ComparedMetric& m : metrics)
      if (m.name == name) return m;
    ADD_FAILURE() << "no metric " << name;
    return ComparedMetric{};
  };
  EXPECT_DOUBLE_EQ(*metric("throughput").ratio(1), 2.5);
  EXPECT_DOUBLE_EQ(*metric("throughput").ratio(2), 0.5);
  EXPECT_DOUBLE_EQ(*metric("p99 TTFT").ratio(1), 0.5);
  EXPECT_DOUBLE_EQ(*metric("p99 TTFT").values[2], 400);  // in ms
  // Metrics no run has are left out; one run without a metric has no ratio there.
  for (const ComparedMetric& m : metrics) EXPECT_NE(m.name, "p99 TPOT");

  const std::string text = compare_text(runs);
  EXPECT_THAT(text, HasSubstr("250 (x2.50)"));
  EXPECT_THAT(text, HasSubstr("[2] b.json"));
  EXPECT_THAT(text, Not(HasSubstr("differ in")));
  const std::string html = compare_html(runs);
  // Higher throughput and lower TTFT are better; the third run is worse in both.
  EXPECT_THAT(html, HasSubstr("250 <span class=\"ratio better\">x2.50</span>"));
  EXPECT_THAT(html, HasSubstr("100 <span class=\"ratio better\">x0.50</span>"));
  EXPECT_THAT(html, HasSubstr("50 <span class=\"ratio worse\">x0.50</span>"));
  EXPECT_THAT(html, HasSubstr("400 <span class=\"ratio worse\">x2.00</span>"));
}

TEST(Compare, SaysWhereTheRunsDiffer) {
  const std::vector<ComparedRun> runs = {{"a", server_result(100, 200, 6)}, {"b", server_result(100, 200, 8)}};
  EXPECT_EQ(differences(runs), std::vector<std::string>{"target qps"});
  EXPECT_THAT(compare_text(runs), HasSubstr("note: the runs differ in target qps"));
  EXPECT_THAT(compare_html(runs), HasSubstr("The runs differ in target qps"));
}

TEST(Compare, TwoMadeRunsFromTheBench) {
  TestSettings s = testing::made_server_settings();
  const nlohmann::json fast = testing::made_result(testing::made_run(s, 500));
  const nlohmann::json slow = testing::made_result(testing::made_run(s, 500, [](int, testing::MadeSample& m) {
    m.tpot_s = 0.04;  // twice the time per token
  }));
  const std::vector<ComparedRun> runs = {{"fast", fast}, {"slow", slow}};
  int found = 0;
  for (const ComparedMetric& m : compared_metrics(runs)) {
    if (m.name != "p99 TPOT") continue;
    ++found;
    EXPECT_NEAR(*m.ratio(1), 2.0, 1e-6);
  }
  EXPECT_EQ(found, 1);
  EXPECT_TRUE(differences(runs).empty());
}

}  // namespace
}  // namespace moeserve::bench
