// VALID or INVALID, and why: LoadGen's MinDurationMet, MinQueriesMet/MinSamplesMet, PerfConstraintsMet and
// EarlyStopping (results.cc, 6.0.17), with LoadGen's recommendation texts, so that the summary's verdict lines
// read exactly as LoadGen's would for the same measurements.
#pragma once

#include <string>
#include <vector>

#include "bench/early_stopping.h"
#include "bench/latency_stats.h"

namespace moeserve::bench {

struct Verdict {
  bool valid = false;
  bool has_perf_constraints = false;  // Server only
  bool perf_constraints_met = true;
  bool min_duration_met = false;
  double duration_s = 0;  // what min_duration is compared with: Offline the longest latency, Server the last
                          // query's scheduled time, SingleStream its issue time
  bool min_queries_met = false;
  bool early_stopping_met = true;
  uint64_t samples_failed = 0;  // of sample_count; any makes the run INVALID
  std::string perf_constraints_recommendation;
  std::string min_duration_recommendation;
  // Without token latencies, one early-stopping result; with them, TPOT's and TTFT's. As in LoadGen, TTFT is only
  // evaluated when TPOT passes (its text stays empty otherwise).
  EarlyStoppingResult early_stopping;
  EarlyStoppingResult early_stopping_tpot;
  EarlyStoppingResult early_stopping_ttft;

  // Every reason the run is INVALID, one sentence each with the numbers (empty when VALID).
  std::vector<std::string> reasons;
};

Verdict judge(const PerformanceSummary& summary, const EffectiveSettings& settings);

// LoadGen's multi-line early-stopping text as one sentence: lines trimmed of their " * " bullets.
std::string one_line(const std::string& text);

// "3 of 64 samples failed": the words every output (summary, detail log, report, result JSON) uses.
std::string failed_samples_text(uint64_t failed, uint64_t total);

}  // namespace moeserve::bench
