#include "engine/metrics.h"

#include <algorithm>

namespace moeserve {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  ++count_;
  sum_ += value;
}

std::vector<double> EngineMetrics::spec_acceptance_rates() const {
  std::vector<double> rates;
  for (uint64_t accepted : spec_accepted_per_position)
    rates.push_back(spec_drafts ? static_cast<double>(accepted) / spec_drafts : 0.0);
  return rates;
}

std::vector<double> latency_buckets_seconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.04, 0.05, 0.08, 0.1, 0.15, 0.25,
          0.5,   0.75,   1.0,   1.5,  2.0,   2.5,  3.0,   5.0,  7.5,  10,  20,  40,   80,  160};
}

std::vector<double> token_count_buckets(int64_t max) {
  std::vector<double> bounds;
  for (double decade = 1;; decade *= 10)
    for (double step : {1.0, 2.0, 5.0}) {
      bounds.push_back(step * decade);
      if (bounds.back() >= static_cast<double>(max)) return bounds;
    }
}

}  // namespace moeserve
