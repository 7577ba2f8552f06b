#include "bench/early_stopping.h"

#include <cmath>

#include "util/error.h"

namespace moeserve::bench {
namespace {

double log_beta(int64_t x, int64_t y) {
  return std::lgamma(static_cast<double>(x)) + std::lgamma(static_cast<double>(y)) -
         std::lgamma(static_cast<double>(x + y));
}

// 2F1(1, b; c; x) by its power series (DLMF 15.2.E1), summed until a term falls below 2^-33, as LoadGen does.
double hypergeometric_2f1_a1(int64_t b, int64_t c, double x) {
  constexpr double kTolerance = 1.0 / (1LL << 33);
  double term = 1.0;
  double result = 1.0;
  for (int64_t i = 0; std::abs(term) > kTolerance; ++i) {
    term *= (b + i) * x / (c + i);
    result += term;
  }
  return result;
}

// I_x(a, b) = x^a (1-x)^(b-1) / (a B(a, b)) * 2F1(1, 1-b; 1+a; x/(x-1))   (DLMF 15.8.E1)
double beta_regularized(double x, int64_t a, int64_t b) {
  return std::exp(a * std::log(x) + (b - 1) * std::log(1 - x) - log_beta(a, b)) / a *
         hypergeometric_2f1_a1(1 - b, 1 + a, x / (x - 1));
}

// The smallest h in [min_h, max_h] with odds(h, t, p, d) < 1 - c, by binary search.
int64_t find_min_passing(int64_t min_h, int64_t max_h, int64_t t, double p, double d, double c) {
  int64_t count = max_h - min_h;
  while (count > 0) {
    const int64_t step = count / 2;
    const int64_t h = min_h + step;
    if (early_stopping_odds(h, t, p, d) < 1 - c) {
      count = step;
    } else {
      min_h = h + 1;
      count -= step + 1;
    }
  }
  return min_h;
}

std::string fixed(double value, int precision) { return fmt::format("{:.{}f}", value, precision); }

}  // namespace

double early_stopping_odds(int64_t h, int64_t t, double p, double d) { return beta_regularized(p - d, h, 1 + t); }

int64_t MinPassingQueriesFinder::operator()(int64_t t, double p, double d, double c) {
  auto& cache = caches_[std::make_tuple(p, d, c)];
  auto it = cache.lower_bound(t);
  if (it != cache.end() && it->first == t) return it->second;

  // Search bounds from the two nearest smaller answers (or from t = -1, 0 when there are none).
  int64_t x0 = -1;
  int64_t y0 = 0;
  int64_t x1 = 0;
  int64_t y1 = static_cast<int64_t>(std::ceil(std::log(1 - c) / std::log(p - d)));
  if (it != cache.begin()) {
    --it;
    x1 = it->first;
    y1 = it->second;
  }
  if (it != cache.begin()) {
    --it;
    x0 = it->first;
    y0 = it->second;
  }
  const double min_slope = (p - d) / (1 - p + d);
  const double max_slope = static_cast<double>((y1 - y0) * (x1 - x0));  // LoadGen multiplies here
  const auto min_h = static_cast<int64_t>(static_cast<double>(t - x1) * min_slope + static_cast<double>(y1));
  const auto max_h = static_cast<int64_t>(static_cast<double>(t - x1) * max_slope + static_cast<double>(y1) + 1);
  const int64_t h = find_min_passing(min_h, max_h, t, p, d, c);
  cache[t] = h;
  return h;
}

EarlyStoppingResult early_stopping(Scenario scenario, int64_t queries_issued,
                                   const std::vector<int64_t>& sorted_latencies, int64_t bound_ns,
                                   double target_percentile) {
  constexpr double kConfidence = 0.99;
  constexpr double kTolerance = 0.0;
  MinPassingQueriesFinder find_min_passing;
  EarlyStoppingResult result;
  switch (scenario) {
    case Scenario::server: {
      int64_t t = 0;
      for (int64_t latency : sorted_latencies) t += latency > bound_ns;
      const int64_t h = find_min_passing(t, target_percentile, kTolerance, kConfidence);
      if (queries_issued >= h + t) {
        result.recommendation = " * Run successful.";
      } else {
        result.met = false;
        result.recommendation = fmt::format(
            " * Run unsuccessful.\n * Processed {} queries.\n * Would need to run at least {} more queries,\n"
            " with the run being successful if every additional\n query were under latency.",
            queries_issued, h + t - queries_issued);
      }
      break;
    }
    case Scenario::single_stream: {
      // The largest t (discarded highest latencies + 1) that n samples can afford at percentile p.
      auto affordable_t = [&](double p) {
        int64_t t = 1;
        for (int64_t i = 2; i < queries_issued + 1; ++i) {
          if (queries_issued < find_min_passing(i, p, kTolerance, kConfidence) + i) {
            t = i - 1;
            break;
          }
        }
        return t;
      };
      auto estimate_at = [&](int64_t t) {
        MOESERVE_CHECK(queries_issued - t >= 0 && static_cast<size_t>(queries_issued - t) < sorted_latencies.size(),
                       "early stopping: {} latencies for {} queries", sorted_latencies.size(), queries_issued);
        return sorted_latencies[static_cast<size_t>(queries_issued - t)];
      };
      const int64_t h_min = find_min_passing(1, target_percentile, kTolerance, kConfidence);
      if (queries_issued < h_min + 1) {
        result.met = false;
        result.recommendation =
            fmt::format(" * Only processed {} queries.\n * Need to process at least {} queries for early stopping.",
                        queries_issued, h_min + 1);
        return result;
      }
      const int64_t t = affordable_t(target_percentile);
      result.latency_estimate_ss = estimate_at(t);
      result.has_ss_estimate = true;
      result.recommendation = fmt::format(
          " * Processed at least {} queries ({}).\n * Would discard {} highest latency queries.\n"
          " * Early stopping {}th percentile estimate: {}",
          h_min + 1, queries_issued, t - 1, fixed(target_percentile * 100, 1), result.latency_estimate_ss);
      // The 99th-percentile estimate, used to infer MultiStream from SingleStream.
      constexpr double kMultiStreamPercentile = 0.99;
      const int64_t h_min_ms = find_min_passing(1, kMultiStreamPercentile, kTolerance, kConfidence);
      if (queries_issued < h_min_ms + 1) {
        result.recommendation += fmt::format(
            "\n * Not enough queries processed for {}th percentile\n early stopping estimate (would need to "
            "process at\n least {} total queries).",
            fixed(kMultiStreamPercentile * 100, 1), h_min_ms + 1);
      } else {
        result.latency_estimate_ms = estimate_at(affordable_t(kMultiStreamPercentile));
        result.has_ms_estimate = true;
        result.recommendation += fmt::format("\n * Early stopping {}th percentile estimate: {}",
                                             fixed(kMultiStreamPercentile * 100, 1), result.latency_estimate_ms);
      }
      break;
    }
    case Scenario::offline:
      break;
  }
  return result;
}

}  // namespace moeserve::bench
