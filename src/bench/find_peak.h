// moeserve bench --find-peak: the highest Server (or Interactive) target_qps that stays VALID, searched the way
// submitters search by hand and LoadGen's FindPeakPerformance mode automates (loadgen.cc FindBoundaries and
// FindPeakPerformanceBinarySearch):
//   1. bracketing: a short probe at the start qps, then up by a factor (1 + step) while probes pass, or down by
//      it while they fail, until one passing and one failing qps are known;
//   2. bisection between them until they are within the tolerance (LoadGen: 10^-decimals_of_precision qps);
//   3. one confirming run at full settings (min duration, min queries, early stopping) at the highest passing qps;
//      if it is INVALID the qps is lowered and confirmed again, at most max_confirms times: by kConfirmBackoff, or
//      by as much as the confirmation's p99 was over its bound (p99 / bound, at most kConfirmBackoffMost), since a
//      long run on a loaded machine can be far slower than its short probes were.
// A probe is short (its own min duration, no equal-issue padding), stops as soon as it can only be INVALID
// (BenchConfig::abort_when_invalid), and is judged on what a short run can judge: the p99 TTFT and TPOT bounds and
// failed samples (LoadGen's FindPeakPerformance judges probes on PerfConstraintsMet too). The search itself sees
// only a probe function, so it is tested against a fake system whose latency grows with load.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/driver.h"

namespace moeserve::bench {

struct ProbeResult {
  std::string kind;  // "bracket", "bisect" or "confirm"
  double target_qps = 0;
  bool valid = false;
  double p99_ttft_s = 0;
  double p99_tpot_ms = 0;
  double tokens_per_second = 0;  // completed output tokens per second
  double over_bound = 0;         // the larger of p99 TTFT / its bound and p99 TPOT / its bound (0: not measured)
  double seconds = 0;            // wall time of the run
  std::vector<std::string> reasons;
  bool stopped = false;  // interrupted: the search ends here
};

struct FindPeakOptions {
  double start_qps = 1;
  double step = 1;             // LoadGen's server_find_peak_qps_boundary_step_size: 1 doubles while bracketing
  double tolerance_qps = 0.1;  // LoadGen's 10^-server_find_peak_qps_decimals_of_precision
  int max_probes = 24;         // bracketing and bisection together
  int max_confirms = 3;
};

// A failed confirmation lowers the qps by this factor before confirming again, or by bound / p99 when that is
// lower, but not below kConfirmBackoffMost.
constexpr double kConfirmBackoff = 0.9;
constexpr double kConfirmBackoffMost = 0.5;

struct FindPeakResult {
  std::vector<ProbeResult> probes;           // in the order run, the confirmations last
  std::optional<double> peak_qps;            // the highest qps whose confirming run was VALID
  std::optional<double> lowest_failing_qps;  // the lowest qps a probe or confirmation found INVALID
  std::string outcome;                       // one sentence: what was found, or why nothing was
};

// Runs one probe (confirm false) or confirming run (confirm true) at `qps`.
using ProbeFn = std::function<ProbeResult(double qps, bool confirm)>;

FindPeakResult find_peak(const ProbeFn& run, const FindPeakOptions& options);

// The settings of a probe at `qps`: the full run's, with target_qps set, min_duration `probe_seconds`, min
// queries 1, no equal-issue padding, abort_when_invalid; and of the confirming run: the full run's at `qps`.
// `qsl_count` is the dataset's size (our QSL's performance and total count).
BenchConfig probe_config(const BenchConfig& full, double qps, double probe_seconds, uint64_t qsl_count);
BenchConfig confirm_config(const BenchConfig& full, double qps, uint64_t qsl_count);

// A run judged as a probe (p99 bounds, failed samples, not stopped early) or, for a confirmation, by its verdict.
ProbeResult probe_result(const RunResult& run, bool confirm);

// The search for the result JSON ("find_peak"): method, options, every probe, the peak and the outcome.
nlohmann::json find_peak_json(const FindPeakResult& result, const FindPeakOptions& options);

}  // namespace moeserve::bench
