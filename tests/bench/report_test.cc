// The report a submitter acts on: for a VALID run, for each reason a run is INVALID, and for an interrupted one,
// the verdict banner and the constraint rows say the right thing with their numbers; Offline draws no Server
// limits; units, round ticks and the settings' sources. Runs are made up sample by sample (report_runs.h).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/engine_series.h"
#include "bench/svg_plot.h"
#include "report_runs.h"

namespace moeserve::bench {
namespace {

using ::testing::HasSubstr;
using testing::made_result;
using testing::made_run;
using testing::made_server_settings;
using testing::MadeSample;
using ::testing::Not;

// The status of the constraint row `name` ("pass", "fail", "skipped"), or "absent".
std::string status_of(const nlohmann::json& result, const std::string& name) {
  for (const auto& c : result["constraints"])
    if (c["name"] == name) return c["status"];
  return "absent";
}

std::string row_html(const std::string& status, const std::string& name) {
  const char* mark = status == "pass" ? "✓" : status == "fail" ? "✗" : "–";
  return fmt::format("<tr class=\"{}\"><td class=\"mark\">{}</td><th>{}</th>", status, mark, name);
}

// The banner and the rows agree with `failing` (rows that must fail); every other row passes or is skipped.
void expect_invalid_for(const RunResult& run, const std::vector<std::string>& failing, const std::string& reason) {
  const nlohmann::json j = made_result(run);
  const std::string html = report_html(j);
  EXPECT_EQ(j["validity"], "INVALID");
  EXPECT_THAT(html, HasSubstr("<div id=\"verdict\" class=\"banner invalid\"><span class=\"word\">INVALID"));
  EXPECT_THAT(html, HasSubstr(reason));
  for (const auto& c : j["constraints"]) {
    const std::string name = c["name"];
    const bool should_fail = std::find(failing.begin(), failing.end(), name) != failing.end();
    EXPECT_EQ(c["status"] == "fail", should_fail) << name << ": " << c.dump();
    EXPECT_THAT(html, HasSubstr(row_html(c["status"], name)));
  }
  for (const std::string& name : failing) EXPECT_EQ(status_of(j, name), "fail") << name;
}

TEST(Report, AValidRunHasAGreenBannerEveryConstraintMetAndATitle) {
  const RunResult run = made_run(made_server_settings(), 500);
  const nlohmann::json j = made_result(run);
  ASSERT_EQ(j["validity"], "VALID") << j["reasons"].dump();
  const std::string html = report_html(j);
  EXPECT_THAT(html, HasSubstr("<div id=\"verdict\" class=\"banner valid\"><span class=\"word\">VALID</span>"));
  for (const char* name : {"p99 TTFT", "p99 TPOT", "min duration", "min queries", "TPOT early stopping",
                           "TTFT early stopping", "failed samples"}) {
    EXPECT_EQ(status_of(j, name), "pass") << name;
    EXPECT_THAT(html, HasSubstr(row_html("pass", name)));
  }
  // Each row with its number: p99 TTFT of 0.1 s against 2 s, TPOT of 20 ms against 80 ms.
  EXPECT_THAT(html, HasSubstr("<td>0.100 s</td><td>&lt;= 2.000 s</td>"));
  EXPECT_THAT(html, HasSubstr("<td>20.000 ms</td><td>&lt;= 80.000 ms</td>"));
  EXPECT_THAT(html, HasSubstr("<td>500 queries (500 samples)</td><td>&gt;= 500 queries (500 samples)</td>"));
  // Title: benchmark, scenario, model, checkpoint hash, date.
  EXPECT_THAT(html, HasSubstr("<h1>gpt-oss-120b · Server · PerformanceOnly</h1>"));
  EXPECT_THAT(html, HasSubstr("model /models/tiny on the cpu runner | checkpoint sha256 c0ffee | 2026-12-01"));
}

TEST(Report, EachReasonForInvalidFailsItsOwnRow) {
  expect_invalid_for(made_run(made_server_settings(), 500,
                              [](int i, MadeSample& s) {
                                if (i % 50 == 0) s.ttft_s = 5;  // 2% over the 2 s bound
                              }),
                     {"p99 TTFT", "TTFT early stopping"}, "p99 TTFT 5000.000 ms is over the 2000.000 ms bound");
  expect_invalid_for(made_run(made_server_settings(), 500,
                              [](int i, MadeSample& s) {
                                if (i % 50 == 0) s.tpot_s = 0.2;
                              }),
                     {"p99 TPOT", "TPOT early stopping"}, "p99 TPOT 200.000 ms is over the 80.000 ms bound");
  TestSettings longer = made_server_settings();
  longer.min_duration_ms = 20'000;
  expect_invalid_for(made_run(longer, 500), {"min duration"},
                     "min duration not met: the last query was scheduled at 9.980 s, under 20.000 s");
  TestSettings more = made_server_settings();
  more.min_query_count = 1000;
  expect_invalid_for(made_run(more, 500), {"min queries"},
                     "min queries not met: 500 queries (500 samples) issued, 1000 (1000) required");
  TestSettings fewer = made_server_settings();
  fewer.min_query_count = 300;
  fewer.min_duration_ms = 5'000;
  const RunResult short_run = made_run(fewer, 300);
  expect_invalid_for(short_run, {"TPOT early stopping"}, "TPOT early stopping not met: Run unsuccessful.");
  EXPECT_EQ(status_of(made_result(short_run), "TTFT early stopping"), "skipped");  // LoadGen skips it then
  expect_invalid_for(made_run(made_server_settings(), 500,
                              [](int i, MadeSample& s) {
                                if (i == 7) s.error = "HTTP 500";
                              }),
                     {"failed samples"}, "1 of 500 samples failed");
}

TEST(Report, AnInterruptedRunSaysSoInTheBannerAndARow) {
  RunResult run = made_run(made_server_settings(), 500, [](int i, MadeSample& s) {
    if (i >= 497) s.error = "cancelled";
  });
  run.interrupted = true;
  expect_invalid_for(run, {"failed samples", "run completed"}, "3 of 500 samples failed");
  const std::string html = report_html(made_result(run));
  EXPECT_THAT(html, HasSubstr("<span class=\"word\">INVALID (interrupted)</span>"));
  EXPECT_THAT(html, HasSubstr("<td>interrupted (Ctrl-C or SIGTERM)</td>"));
}

TEST(Report, OfflineDrawsNoServerLimits) {
  TestSettings s = made_server_settings();
  s.scenario = Scenario::offline;
  s.offline_expected_qps = 50;
  s.min_duration_ms = 0;
  s.min_query_count = 200;
  const nlohmann::json j = made_result(made_run(s, 200));
  EXPECT_EQ(j["validity"], "VALID") << j["reasons"].dump();
  const std::string html = report_html(j);
  EXPECT_THAT(html, HasSubstr("data-chart=\"latency-histogram\""));
  EXPECT_THAT(html, HasSubstr("data-chart=\"latency-vs-output\""));
  EXPECT_THAT(html, Not(HasSubstr("limit</text>")));
  EXPECT_THAT(html, Not(HasSubstr("data-chart=\"ttft-histogram\"")));
  EXPECT_EQ(status_of(j, "p99 TTFT"), "absent");
  EXPECT_EQ(status_of(j, "TPOT early stopping"), "absent");
  // The Server run has them.
  const std::string server = report_html(made_result(made_run(made_server_settings(), 500)));
  EXPECT_THAT(server, HasSubstr("TTFT limit</text>"));
  EXPECT_THAT(server, HasSubstr("TPOT limit</text>"));
}

TEST(Report, UnitsAreMillisecondsWhereTheyPrintMillisecondsAndOverridesAreMarked) {
  const std::string html = report_html(made_result(made_run(made_server_settings(), 500)));
  EXPECT_THAT(html, HasSubstr("<table id=\"percentiles\"><tr><th>ms</th>"));
  EXPECT_THAT(html, Not(HasSubstr("<th>latency_ns</th>")));
  EXPECT_THAT(html, HasSubstr("<th>server_ttft_latency (ms)</th><td>2000</td>"));
  EXPECT_THAT(html, HasSubstr("<tr class=\"override\"><th>server_target_qps</th><td>50</td><td>flag ●</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr class=\"override\"><th>min_query_count</th><td>500</td><td>user.conf ●</td>"));
  EXPECT_THAT(html, HasSubstr("<tr><th>max_query_count</th><td>0</td><td>default</td></tr>"));
}

TEST(SvgPlot, TicksAreRound) {
  EXPECT_EQ(nice_ticks(0, 2295), (std::vector<double>{0, 500, 1000, 1500, 2000, 2500}));
  EXPECT_EQ(nice_ticks(3.2, 11.1, 6), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  const std::vector<double> small = nice_ticks(0, 0.27);  // steps of 0.05
  ASSERT_EQ(small.size(), 7u);
  EXPECT_NEAR(small.back(), 0.3, 1e-12);
  // Printed with the step's decimals, not as 0.30000000000000004.
  const std::string svg = svg_histogram({0.05, 0.27}, {"h", "t", "s", "n", {}, {}});
  EXPECT_THAT(svg, HasSubstr(">0.30</text>"));
  EXPECT_THAT(svg, Not(HasSubstr("0.300")));
}

TEST(EngineSeries, KeepsBoundedMemoryAndExactCounters) {
  EngineSeries series(std::chrono::milliseconds(10));
  const TimePoint t0{};
  for (int i = 0; i < 5000; ++i) {
    EngineReading r;
    r.time = t0 + std::chrono::milliseconds(10 * i);
    r.preemptions = static_cast<uint64_t>(i);
    r.steps = static_cast<uint64_t>(2 * i);
    r.busy_seconds = 0.004 * i;  // 2 ms a step
    r.running = static_cast<size_t>(i % 7);
    if (series.due(r.time)) series.add(r);
  }
  EXPECT_LE(series.size(), EngineSeries::kMaxPoints);
  EXPECT_GT(series.period().count(), 10);  // thinned at least once
  const nlohmann::json j = series.to_json(t0);
  uint64_t preemptions = 0;
  for (const auto& p : j["preemptions"]) preemptions += p.get<uint64_t>();
  // Per-interval preemptions add up to the counter's growth between the first and last kept readings.
  const double last_t = j["t"].back().get<double>();
  EXPECT_EQ(preemptions, static_cast<uint64_t>(std::llround(last_t / 0.01)));
  for (const auto& ms : j["mean_step_ms"]) EXPECT_NEAR(ms.get<double>(), 2.0, 1e-9);
}

}  // namespace
}  // namespace moeserve::bench
