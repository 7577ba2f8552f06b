// The report as a browser shows it: each kind of page (a Server run with the engine's series and a find-peak
// search, an Offline run, an INVALID run, a comparison) rendered by headless Chromium (Debian's chromium, which
// scripts/setup.sh installs), whose DOM must hold the verdict banner, the constraints table and every chart with
// data in it; and a screenshot must come out as a PNG.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/compare.h"
#include "bench/engine_series.h"
#include "bench/find_peak.h"
#include "report_runs.h"
#include "test_util.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    const auto found = moeserve::testing::run_command(fmt::format("command -v {}", name));
    if (found.exit_code == 0) return name;
  }
  return "";
}

// Chromium's flags for a root user in a container without a display.
std::string headless(const std::string& browser) {
  return browser + " --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run";
}

// The DOM Chromium builds from the page at `path`.
std::string rendered_dom(const std::string& path) {
  const std::string browser = chromium();
  if (browser.empty()) ADD_FAILURE() << "no chromium on PATH: scripts/setup.sh installs Debian's package";
  const auto r = moeserve::testing::run_command(
      fmt::format("{} --dump-dom file://{} 2>/dev/null", headless(browser), std::filesystem::absolute(path).string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

std::string write_page(const std::string& name, const std::string& html) {
  const std::string path = moeserve::testing::temp_dir("report-render") + "/" + name;
  write_text_file(path, html);
  return path;
}

// A made-up engine series: a batch that fills, KV use, a preemption, prefix hits.
nlohmann::json made_engine_series(TimePoint start) {
  EngineSeries series(std::chrono::milliseconds(100));
  for (int i = 0; i <= 100; ++i) {
    EngineReading r;
    r.time = start + std::chrono::milliseconds(100 * i);
    r.running = static_cast<size_t>(std::min(i, 40));
    r.waiting = static_cast<size_t>(i > 60 ? 5 : 0);
    r.kv_usage = std::min(1.0, i / 80.0);
    r.steps = static_cast<uint64_t>(10 * i);
    r.busy_seconds = 0.09 * i;
    r.preemptions = static_cast<uint64_t>(i / 50);
    r.prefix_queried_tokens = static_cast<uint64_t>(1000 * i);
    r.prefix_hit_tokens = static_cast<uint64_t>(300 * i);
    series.add(r);
  }
  return series.to_json(start);
}

nlohmann::json made_find_peak() {
  auto system = [](double qps, bool) {
    ProbeResult p;
    p.p99_ttft_s = 0.2 / (1 - std::min(qps, 9.9) / 10);
    p.p99_tpot_ms = 20 / (1 - std::min(qps, 9.9) / 10);
    p.valid = p.p99_tpot_ms <= 80;
    return p;
  };
  const FindPeakOptions options{.start_qps = 1};
  return find_peak_json(find_peak(system, options), options);
}

TEST(ReportRender, AServerPageShowsTheBannerTheConstraintsAndEveryChart) {
  RunResult run = testing::made_run(testing::made_server_settings(), 500);
  run.sut_timeline = made_engine_series(run.start);
  nlohmann::json j = testing::made_result(run);
  j["find_peak"] = made_find_peak();
  const std::string dom = rendered_dom(write_page("server.html", report_html(j)));
  EXPECT_THAT(dom, HasSubstr("id=\"verdict\" class=\"banner valid\""));
  EXPECT_THAT(dom, HasSubstr("<table id=\"constraints\">"));
  EXPECT_THAT(dom, HasSubstr("<table id=\"find-peak-probes\">"));
  for (const char* chart :
       {"ttft-histogram", "tpot-histogram", "ttft-vs-issue", "tpot-vs-issue", "ttft-vs-output", "tpot-vs-output",
        "issued-completed", "output-tokens", "in-flight", "engine-batch", "engine-kv", "engine-preemptions",
        "engine-prefix", "engine-step-time", "find-peak-ttft", "find-peak-tpot"})
    EXPECT_THAT(dom, HasSubstr(fmt::format("data-chart=\"{}\"", chart))) << chart;
  EXPECT_THAT(dom, Not(HasSubstr("no data")));
}

TEST(ReportRender, OfflineInvalidAndComparePagesRender) {
  TestSettings offline = testing::made_server_settings();
  offline.scenario = Scenario::offline;
  offline.min_duration_ms = 0;
  offline.min_query_count = 200;  // Offline: the samples of its one query
  const std::string offline_dom =
      rendered_dom(write_page("offline.html", report_html(testing::made_result(testing::made_run(offline, 200)))));
  EXPECT_THAT(offline_dom, HasSubstr("id=\"verdict\" class=\"banner valid\""));
  for (const char* chart :
       {"latency-histogram", "latency-vs-output", "latency-vs-issue", "issued-completed", "output-tokens", "in-flight"})
    EXPECT_THAT(offline_dom, HasSubstr(fmt::format("data-chart=\"{}\"", chart))) << chart;

  const RunResult slow = testing::made_run(testing::made_server_settings(), 500, [](int i, testing::MadeSample& s) {
    if (i % 20 == 0) s.tpot_s = 0.3;
  });
  const nlohmann::json invalid = testing::made_result(slow);
  const std::string invalid_dom = rendered_dom(write_page("invalid.html", report_html(invalid)));
  EXPECT_THAT(invalid_dom, HasSubstr("id=\"verdict\" class=\"banner invalid\""));
  EXPECT_THAT(invalid_dom, HasSubstr("p99 TPOT 300.000 ms is over the 80.000 ms bound"));

  const nlohmann::json valid = testing::made_result(testing::made_run(testing::made_server_settings(), 500));
  const std::string compare_path = write_page("compare.html", compare_html({{"valid", valid}, {"slow", invalid}}));
  const std::string compare_dom = rendered_dom(compare_path);
  EXPECT_THAT(compare_dom, HasSubstr("<table id=\"compare\">"));
  EXPECT_THAT(compare_dom, HasSubstr("class=\"ratio worse\""));

  // A screenshot, as docs/ holds them, is a PNG.
  const std::string png = compare_path + ".png";
  const auto shot = moeserve::testing::run_command(
      fmt::format("{} --window-size=800,400 --screenshot={} file://{} 2>&1", headless(chromium()), png, compare_path));
  ASSERT_EQ(shot.exit_code, 0) << shot.output;
  EXPECT_EQ(read_text_file(png).substr(1, 3), "PNG");
}

}  // namespace
}  // namespace moeserve::bench
