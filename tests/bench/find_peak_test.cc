// --find-peak's search: against a probe function with a known threshold (the logic alone: bracketing up and down,
// bisection to the tolerance, the confirmation and its back-off, an interrupt), and end to end through the
// driver against a fake system under test whose latency grows with load (a queue in virtual time, so the search
// is tested without depending on wall time).
#include "bench/find_peak.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "bench_test_util.h"

namespace moeserve::bench {
namespace {

// A system whose p99 TPOT is 20 ms / (1 - qps / 10): VALID (80 ms bound) up to 7.5 qps. Confirming runs, longer,
// see `confirm_factor` times the latency.
struct ThresholdSystem {
  double confirm_factor = 1;
  std::vector<double> asked{};
  ProbeResult operator()(double qps, bool confirm) {
    asked.push_back(qps);
    ProbeResult p;
    p.p99_tpot_ms = qps < 10 ? 20 / (1 - qps / 10) * (confirm ? confirm_factor : 1) : 1e9;
    p.valid = p.p99_tpot_ms <= 80;
    return p;
  }
};

TEST(FindPeak, BracketsUpThenBisectsToTheToleranceAndConfirms) {
  ThresholdSystem system;
  const FindPeakOptions options{.start_qps = 1, .step = 1, .tolerance_qps = 0.1};
  const FindPeakResult r = find_peak(std::ref(system), options);
  ASSERT_TRUE(r.peak_qps.has_value()) << r.outcome;
  ASSERT_TRUE(r.lowest_failing_qps.has_value());
  // The peak is VALID, the lowest failing probe above it is within the tolerance, and the true edge between.
  EXPECT_LE(*r.peak_qps, 7.5);
  EXPECT_GT(*r.lowest_failing_qps, 7.5);
  EXPECT_LE(*r.lowest_failing_qps - *r.peak_qps, options.tolerance_qps);
  // 1, 2, 4, 8 bracket [4, 8]; then bisection; the last run is the confirmation at the peak.
  EXPECT_EQ(std::vector<double>(system.asked.begin(), system.asked.begin() + 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(r.probes[3].kind, "bracket");
  EXPECT_EQ(r.probes[4].kind, "bisect");
  EXPECT_EQ(r.probes.back().kind, "confirm");
  EXPECT_TRUE(r.probes.back().valid);
  EXPECT_EQ(r.probes.back().target_qps, *r.peak_qps);
}

TEST(FindPeak, BracketsDownFromAnInvalidStart) {
  ThresholdSystem system;
  const FindPeakResult r = find_peak(std::ref(system), {.start_qps = 40, .step = 1, .tolerance_qps = 0.05});
  ASSERT_TRUE(r.peak_qps.has_value()) << r.outcome;
  EXPECT_EQ(std::vector<double>(system.asked.begin(), system.asked.begin() + 4), (std::vector<double>{40, 20, 10, 5}));
  EXPECT_LE(*r.peak_qps, 7.5);
  EXPECT_LE(*r.lowest_failing_qps - *r.peak_qps, 0.05);
}

TEST(FindPeak, AFailedConfirmationBacksOffAndConfirmsAgain) {
  ThresholdSystem system{.confirm_factor = 1.5};  // confirming runs VALID only up to 10 (1 - 30 / 80) = 6.25 qps
  const FindPeakResult r = find_peak(std::ref(system), {.start_qps = 1, .step = 1, .tolerance_qps = 0.1});
  ASSERT_TRUE(r.peak_qps.has_value()) << r.outcome;
  EXPECT_LE(*r.peak_qps, 6.25);
  int confirms = 0;
  for (const ProbeResult& p : r.probes) confirms += p.kind == "confirm";
  EXPECT_EQ(confirms, 3);  // ~7.45 and ~6.7 fail, ~6.04 passes
  EXPECT_NEAR(*r.peak_qps, r.probes[r.probes.size() - 3].target_qps * kConfirmBackoff * kConfirmBackoff, 1e-9);
  EXPECT_NEAR(*r.lowest_failing_qps, r.probes[r.probes.size() - 2].target_qps, 1e-9);
}

TEST(FindPeak, AConfirmationFarOverItsBoundBacksOffAsFar) {
  // Confirming runs see twice the probes' load: VALID only up to 10 (1 - 40 / 80) = 5 qps.
  ThresholdSystem system{.confirm_factor = 2};
  auto with_ratio = [&](double qps, bool confirm) {
    ProbeResult p = system(qps, confirm);
    p.over_bound = p.p99_tpot_ms / 80;
    return p;
  };
  const FindPeakResult r = find_peak(with_ratio, {.start_qps = 1, .step = 1, .tolerance_qps = 0.1});
  ASSERT_TRUE(r.peak_qps.has_value()) << r.outcome;
  const ProbeResult& first = r.probes[r.probes.size() - 2];
  ASSERT_EQ(first.kind, "confirm");
  EXPECT_FALSE(first.valid);
  // ~7.45 qps confirmed at p99 ~157 ms, 1.96x over: lowered by 1 / 1.96 in one step, where 0.9 would take five.
  EXPECT_NEAR(*r.peak_qps, first.target_qps / first.over_bound, 1e-9);
  EXPECT_LE(*r.peak_qps, 5);
}

TEST(FindPeak, NothingValidAndInterruptedAreSaid) {
  auto never = [](double, bool) { return ProbeResult{}; };
  const FindPeakResult none = find_peak(never, {.start_qps = 1, .max_probes = 5});
  EXPECT_FALSE(none.peak_qps.has_value());
  EXPECT_EQ(none.probes.size(), 5u);
  EXPECT_EQ(none.outcome, "no probe was VALID, down to 0.0625 qps");
  int calls = 0;
  auto interrupted = [&](double, bool) {
    ProbeResult p;
    p.valid = true;
    p.stopped = ++calls == 2;
    return p;
  };
  const FindPeakResult stopped = find_peak(interrupted, {.start_qps = 1});
  EXPECT_EQ(stopped.outcome, "interrupted");
  EXPECT_EQ(stopped.probes.size(), 2u);
  EXPECT_FALSE(stopped.peak_qps.has_value());
}

// One server taking `service` per sample, first come first served, in virtual time: a sample's first token comes
// when its turn ends and the rest `token_gap` apart, so TTFT grows with load as a queue's wait does. It reports
// at once, with times in the future: the bench takes the SUT's times as given.
class QueueSut : public SystemUnderTest {
 public:
  std::string name() const override { return "queue"; }
  nlohmann::json describe() const override { return {{"kind", "test"}}; }
  void start(SampleObserver& observer) override {
    observer_ = &observer;
    busy_until_ = TimePoint{};
  }
  void issue(std::span<const SampleRequest> samples) override {
    for (const SampleRequest& s : samples) {
      busy_until_ = std::max(busy_until_, s.scheduled) + kService;
      observer_->on_first_token(s.id, 1, busy_until_);
      SampleOutput out;
      out.tokens.assign(static_cast<size_t>(s.max_tokens), 1);
      out.token_count = s.max_tokens;
      observer_->on_complete(s.id, std::move(out), busy_until_ + kTokenGap * (s.max_tokens - 1));
    }
  }
  void cancel_all() override {}
  void stop() override {}

  static constexpr std::chrono::microseconds kService{500};  // 2,000 samples/s at most
  static constexpr std::chrono::microseconds kTokenGap{1000};

 private:
  SampleObserver* observer_ = nullptr;
  TimePoint busy_until_{};
};

TEST(FindPeak, ThroughTheDriverAgainstASystemWhoseLatencyGrowsWithLoad) {
  Dataset dataset;
  dataset.format = "test";
  dataset.path = "queue";
  for (int i = 0; i < 64; ++i) dataset.samples.push_back({{1, 2, 3}, 10, "", ""});
  BenchConfig full = testing::small_run(Scenario::server, TestMode::performance_only, 64, 10, "find-peak");
  TestSettings s = full.settings.requested;
  s.server_ttft_latency = 5'000'000;  // 5 ms: about ten services' wait
  s.min_duration_ms = 300;
  s.min_query_count = 1000;
  full.settings = effective_settings(s, 64, 64);
  full.preflight = false;
  const std::string dir = full.output_dir;
  QueueSut sut;
  int index = 0;
  auto probe = [&](double qps, bool confirm) {
    BenchConfig c = confirm ? confirm_config(full, qps, 64) : probe_config(full, qps, 0.05, 64);
    c.output_dir = fmt::format("{}/{}", dir, ++index);
    return probe_result(run_benchmark(sut, dataset, c), confirm);
  };
  const FindPeakOptions options{.start_qps = 250, .step = 1, .tolerance_qps = 10};
  const FindPeakResult r = find_peak(probe, options);
  ASSERT_TRUE(r.peak_qps.has_value()) << r.outcome;
  ASSERT_TRUE(r.lowest_failing_qps.has_value());
  EXPECT_TRUE(r.probes.back().valid);
  EXPECT_EQ(r.probes.back().kind, "confirm");
  EXPECT_LT(*r.peak_qps, 2000);  // under the system's capacity
  // The stated tolerance: with the first confirmation VALID, the lowest INVALID qps is within tolerance_qps of
  // the peak; else the peak is the last failed confirmation's qps lowered by one back-off step (0.5x to 0.9x).
  EXPECT_GT(*r.lowest_failing_qps, *r.peak_qps);
  const ProbeResult& before = r.probes[r.probes.size() - 2];
  if (before.kind != "confirm") {
    EXPECT_LE(*r.lowest_failing_qps - *r.peak_qps, options.tolerance_qps);
  } else {
    EXPECT_FALSE(before.valid);
    EXPECT_GE(*r.peak_qps, before.target_qps * kConfirmBackoffMost - 1e-9);
    EXPECT_LE(*r.peak_qps, before.target_qps * kConfirmBackoff + 1e-9);
  }
  // Probes past the capacity stopped as soon as they were certainly INVALID.
  bool stopped_early = false;
  for (const ProbeResult& p : r.probes)
    for (const std::string& reason : p.reasons) stopped_early |= reason.starts_with("stopped early: certainly INVALID");
  EXPECT_TRUE(stopped_early);
}

}  // namespace
}  // namespace moeserve::bench
