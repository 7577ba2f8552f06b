// Runs made up sample by sample for the report's tests: the times a SUT would report, turned into LoadGen's
// results and verdict by the bench's own summarize() and judge(), so that each INVALID reason can be produced
// exactly and at once, without a model or wall time.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "bench/driver.h"
#include "bench/report.h"

namespace moeserve::bench::testing {

// One made-up sample: its latencies and length (defaults well inside the GPT-OSS Server bounds).
struct MadeSample {
  double ttft_s = 0.1;
  double tpot_s = 0.02;
  int tokens = 10;
  std::string error;
};

// Server with token latencies (TTFT 2 s, TPOT 80 ms at p99), 50 qps, min duration 10 s and min query count 500:
// 500 samples of the defaults are VALID (early stopping needs 459 with none over).
inline TestSettings made_server_settings() {
  TestSettings s;
  s.scenario = Scenario::server;
  s.mode = TestMode::performance_only;
  s.server_target_qps = 50;
  s.min_duration_ms = 9'000;  // the 500th sample is scheduled at 9.98 s
  s.min_query_count = 500;
  s.use_token_latencies = true;
  s.server_ttft_latency = 2'000'000'000;
  s.server_tpot_latency = 80'000'000;
  return s;
}

// `n` samples issued 1 / target_qps apart (Offline: all at the start), each shaped by `shape`.
inline RunResult made_run(const TestSettings& requested, int n,
                          const std::function<void(int, MadeSample&)>& shape = nullptr) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  RunResult run;
  run.settings = effective_settings(requested, static_cast<uint64_t>(n), static_cast<uint64_t>(n));
  run.sut_name = "made-up";
  run.start = TimePoint{} + std::chrono::hours(1);
  run.test_datetime = "2026-12-01T12:00:00Z";
  const bool offline = requested.scenario == Scenario::offline;
  PerformanceResult pr;
  auto seconds = [](double s) { return duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  TimePoint last_done = run.start;
  for (int i = 0; i < n; ++i) {
    MadeSample m;
    if (shape) shape(i, m);
    SampleRecord r;
    r.sequence_id = static_cast<uint64_t>(i);
    r.qsl_idx = static_cast<uint64_t>(i);
    r.issued = r.completed = true;
    r.scheduled = run.start + (offline ? Clock::duration(0) : seconds(i / requested.server_target_qps));
    r.issued_at = r.scheduled;
    r.first_token_at = r.scheduled + seconds(m.ttft_s);
    r.completed_at = *r.first_token_at + seconds(m.tpot_s * (m.tokens - 1));
    r.token_count = m.tokens;
    r.error = m.error;
    const int64_t latency = duration_cast<nanoseconds>(r.completed_at - r.scheduled).count();
    const int64_t ttft = duration_cast<nanoseconds>(*r.first_token_at - r.scheduled).count();
    pr.sample_latencies.push_back(latency);
    pr.tokens_per_sample.push_back(m.tokens);
    if (!offline) {
      pr.first_token_latencies.push_back(ttft);
      pr.time_per_output_token.push_back(time_per_output_token_ns(latency, ttft, m.tokens));
    }
    pr.failed_samples += !m.error.empty();
    run.failed_samples += !m.error.empty();
    pr.max_latency = std::max(pr.max_latency, static_cast<double>(latency) / 1e9);
    pr.final_query_scheduled_time = std::chrono::duration<double>(r.scheduled - run.start).count();
    pr.final_query_issued_time = pr.final_query_scheduled_time;
    last_done = std::max(last_done, r.completed_at);
    run.samples.push_back(r);
  }
  pr.queries_issued = offline ? 1 : static_cast<uint64_t>(n);
  pr.final_query_all_samples_done_time = std::chrono::duration<double>(last_done - run.start).count();
  run.summary = summarize(std::move(pr), run.settings);
  run.verdict = judge(*run.summary, run.settings);
  return run;
}

// The result JSON of a made-up run, with what the bench command would add about it.
inline nlohmann::json made_result(const RunResult& run) {
  return result_json(run, {{"benchmark", "gpt-oss-120b"},
                           {"scenario", scenario_name(run.settings.scenario)},
                           {"system_under_test",
                            {{"kind", "in-process"},
                             {"runner", "cpu"},
                             {"checkpoint", {{"directory", "/models/tiny"}, {"sha256", "c0ffee"}}}}},
                           {"setting_sources", {{"server_target_qps", "flag"}, {"min_query_count", "user.conf"}}}});
}

}  // namespace moeserve::bench::testing
