// LoadGen's early-stopping criterion (loadgen/early_stopping.cc and PerformanceSummary::EarlyStopping in
// results.cc, 6.0.17): with t of n samples over the latency bound, the run passes at percentile p with confidence
// c when n >= h + t, where h is the smallest count of passing samples such that t or fewer failures in h + t
// samples has probability below 1 - c if the true failure rate were 1 - p. The binomial tail is computed as
// LoadGen does (a regularized incomplete beta through a hypergeometric series), so h is the same integer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "bench/settings.h"

namespace moeserve::bench {

// The probability of t or fewer over-latency samples in h + t, when each passes with probability p - d.
double early_stopping_odds(int64_t h, int64_t t, double p, double d);

// MinPassingQueriesFinder: the minimum h with odds(h, t, p, d) < 1 - c, by a binary search whose bounds come from
// the answers it already has (it caches per (p, d, c), so the search order matters for the exact answer; one
// finder serves one EarlyStopping evaluation, as in LoadGen).
class MinPassingQueriesFinder {
 public:
  int64_t operator()(int64_t t, double p, double d, double c);

 private:
  std::map<std::tuple<double, double, double>, std::map<int64_t, int64_t>> caches_;
};

struct EarlyStoppingResult {
  bool met = true;
  std::string recommendation;       // LoadGen's text, lines separated by '\n'
  int64_t latency_estimate_ss = 0;  // SingleStream: the early-stopping estimate at the target percentile
  int64_t latency_estimate_ms = 0;  // SingleStream: ... at the 99th percentile (for MultiStream inference)
  bool has_ss_estimate = false;
  bool has_ms_estimate = false;
};

// PerformanceSummary::EarlyStopping for one latency array (sample latencies, or TTFT or TPOT with token
// latencies). `sorted_latencies` ascending, ns. Server compares with `bound_ns`; SingleStream estimates the
// percentile; Offline always passes with an empty recommendation.
EarlyStoppingResult early_stopping(Scenario scenario, int64_t queries_issued,
                                   const std::vector<int64_t>& sorted_latencies, int64_t bound_ns,
                                   double target_percentile);

}  // namespace moeserve::bench
