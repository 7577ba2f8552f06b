// What a run measured (LoadGen's PerformanceResult) and the statistics LoadGen derives from it
// (PerformanceSummary::ProcessLatencies / ProcessTokenLatencies in results.cc, 6.0.17). Times in ns.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "bench/settings.h"

namespace moeserve::bench {

// A sample's token count that was never recorded (LoadGen's nTokenInvalid); not added to the token count.
constexpr int64_t kTokenCountInvalid = std::numeric_limits<int64_t>::min();

// The token count LoadGen records for a sample reported with n_tokens: n_tokens below 2 are errors in its log
// and recorded as 0.
int64_t recorded_token_count(int64_t n_tokens);
// LoadGen: TPOT = (latency - TTFT) / (tokens - 1), in integer ns, with tokens as recorded: a sample recorded with
// 0 tokens gets (latency - TTFT) / -1, as in LoadGen, so the numbers match (it is an error in the log either way).
int64_t time_per_output_token_ns(int64_t latency_ns, int64_t first_token_latency_ns, int64_t n_tokens);

struct PerformanceResult {
  std::vector<int64_t> sample_latencies;       // completion - scheduled, per completed sample
  std::vector<int64_t> first_token_latencies;  // first token - scheduled (token latencies, not Offline)
  std::vector<int64_t> time_per_output_token;  // time_per_output_token_ns per sample
  std::vector<int64_t> tokens_per_sample;      // n_tokens as reported at completion
  uint64_t queries_issued = 0;
  // Samples the SUT failed (an HTTP error, a refused request, cancelled): their latencies are counted above as
  // LoadGen would count any completion, and any failure makes the run INVALID (moeserve's rule: LoadGen has no
  // notion of a failed sample, so a server answering 404 at once would otherwise be a fast VALID run).
  uint64_t failed_samples = 0;
  double max_latency = 0;                 // seconds
  double final_query_scheduled_time = 0;  // seconds from the start, of the last query issued
  double final_query_issued_time = 0;
  double final_query_all_samples_done_time = 0;
};

// The percentiles every LoadGen summary reports.
constexpr std::array<double, 6> kReportedPercentiles = {0.50, 0.90, 0.95, 0.97, 0.99, 0.999};

struct LatencyStats {
  int64_t min = 0;
  int64_t max = 0;
  int64_t mean = 0;  // integer division of the sum, as LoadGen
  std::array<int64_t, kReportedPercentiles.size()> percentiles{};
  int64_t at_target = 0;  // at the run's target percentile
};

// LoadGen's percentile: sorted[size_t(n * p)] over the ascending values (no interpolation). `mean_divisor` is
// LoadGen's sample count, which it also uses for the TTFT and TPOT means. Empty input gives zeros.
LatencyStats latency_stats(const std::vector<int64_t>& sorted, double target_percentile, size_t mean_divisor);

// Everything the summary, the detail log and the report print, computed once.
struct PerformanceSummary {
  PerformanceResult result;  // arrays sorted ascending
  uint64_t sample_count = 0;
  uint64_t token_count = 0;
  LatencyStats latency;
  LatencyStats first_token;  // token latencies only
  LatencyStats tpot;
  uint64_t overlatency_query_count = 0;  // Server: samples over target_latency

  double completed_samples_per_second() const;  // Server: (n - 1) / final query done time
  double scheduled_samples_per_second() const;  // Server: (n - 1) / final query scheduled time
  double samples_per_second() const;            // Offline: n / max latency
  double tokens_per_second() const;             // Offline: tokens / max latency
  double completed_tokens_per_second() const;   // Server, SingleStream: tokens / final query done time
};

PerformanceSummary summarize(PerformanceResult result, const EffectiveSettings& settings);

}  // namespace moeserve::bench
