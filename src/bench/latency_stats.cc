#include "bench/latency_stats.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::bench {

int64_t recorded_token_count(int64_t n_tokens) { return n_tokens > 1 ? n_tokens : 0; }

int64_t time_per_output_token_ns(int64_t latency_ns, int64_t first_token_latency_ns, int64_t n_tokens) {
  return (latency_ns - first_token_latency_ns) / (recorded_token_count(n_tokens) - 1);
}

LatencyStats latency_stats(const std::vector<int64_t>& sorted, double target_percentile, size_t mean_divisor) {
  LatencyStats stats;
  if (sorted.empty()) return stats;
  auto at = [&](double p) {
    const auto index = static_cast<size_t>(static_cast<double>(mean_divisor) * p);
    MOESERVE_CHECK(index < sorted.size(), "internal: percentile index {} of {} values", index, sorted.size());
    return sorted[index];
  };
  int64_t sum = 0;
  for (int64_t v : sorted) sum += v;
  stats.mean = sum / static_cast<int64_t>(mean_divisor);
  stats.min = sorted.front();
  stats.max = sorted.back();
  for (size_t i = 0; i < kReportedPercentiles.size(); ++i) stats.percentiles[i] = at(kReportedPercentiles[i]);
  stats.at_target = at(target_percentile);
  return stats;
}

PerformanceSummary summarize(PerformanceResult result, const EffectiveSettings& settings) {
  PerformanceSummary s;
  std::sort(result.sample_latencies.begin(), result.sample_latencies.end());
  std::sort(result.first_token_latencies.begin(), result.first_token_latencies.end());
  std::sort(result.time_per_output_token.begin(), result.time_per_output_token.end());
  s.sample_count = result.sample_latencies.size();
  const double p = settings.target_latency_percentile;
  s.latency = latency_stats(result.sample_latencies, p, s.sample_count);
  if (settings.scenario == Scenario::server) {
    const int64_t over = settings.target_latency_ns + 1;
    s.overlatency_query_count =
        static_cast<uint64_t>(result.sample_latencies.end() -
                              std::lower_bound(result.sample_latencies.begin(), result.sample_latencies.end(), over));
  }
  if (settings.requested.use_token_latencies) {
    for (int64_t n : result.tokens_per_sample)
      if (n != kTokenCountInvalid) s.token_count += static_cast<uint64_t>(n);
    s.first_token = latency_stats(result.first_token_latencies, p, s.sample_count);
    s.tpot = latency_stats(result.time_per_output_token, p, s.sample_count);
  }
  s.result = std::move(result);
  return s;
}

double PerformanceSummary::completed_samples_per_second() const {
  return (static_cast<double>(sample_count) - 1) / result.final_query_all_samples_done_time;
}
double PerformanceSummary::scheduled_samples_per_second() const {
  return (static_cast<double>(sample_count) - 1) / result.final_query_scheduled_time;
}
double PerformanceSummary::samples_per_second() const { return static_cast<double>(sample_count) / result.max_latency; }
double PerformanceSummary::tokens_per_second() const { return static_cast<double>(token_count) / result.max_latency; }
double PerformanceSummary::completed_tokens_per_second() const {
  return static_cast<double>(token_count) / result.final_query_all_samples_done_time;
}

}  // namespace moeserve::bench
