// The contents LoadGen writes to mlperf_log_summary.txt and mlperf_log_detail.txt, line for line as LoadGen 6.0.17
// writes them (PerformanceSummary::LogSummary / LogDetail in results.cc, TestSettingsInternal::LogSummary and the
// settings logging in test_settings_internal.cc), so MLPerf's tools read our results as they read LoadGen's.
#pragma once

#include <string>

#include "bench/latency_stats.h"
#include "bench/mlperf_log.h"
#include "bench/verdict.h"

namespace moeserve::bench {

// The performance-mode summary, without the final warnings/errors lines.
std::string summary_text(const std::string& sut_name, const EffectiveSettings& settings,
                         const PerformanceSummary& summary, const Verdict& verdict);
// LoadGen's last summary lines: "No warnings encountered during test." / "N ERRORS encountered. See detailed log."
std::string summary_trailer(int warnings, int errors);

// The requested_* and effective_* settings lines LoadGen logs before a run.
void log_settings(DetailLog& log, const EffectiveSettings& settings);
// The result_* lines LoadGen logs after a performance run.
void log_results(DetailLog& log, const EffectiveSettings& settings, const PerformanceSummary& summary,
                 const Verdict& verdict);

}  // namespace moeserve::bench
