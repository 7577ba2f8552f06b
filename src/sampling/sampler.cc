#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace moeserve {

void validate_sampling_params(const SamplingParams& p) {
  MOESERVE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature {} must be >= 0",
                 p.temperature);
  MOESERVE_CHECK(p.top_k >= 0, "top_k {} must be >= 0 (0 disables it)", p.top_k);
  MOESERVE_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p {} must be in (0, 1]", p.top_p);
  MOESERVE_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p {} must be in [0, 1]", p.min_p);
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

std::vector<double> filtered_weights(std::span<const float> logits, const SamplingParams& params) {
  const size_t n = logits.size();
  if (params.greedy()) {
    std::vector<double> one_hot(n, 0.0);
    one_hot[argmax(logits)] = 1.0;
    return one_hot;
  }
  const float max_logit = logits[argmax(logits)];
  // Probabilities up to normalisation, in double so that the cumulative walk is exact enough at 200k tokens.
  std::vector<double> weight(n);
  for (size_t i = 0; i < n; ++i) weight[i] = std::exp(static_cast<double>(logits[i] - max_logit) / params.temperature);

  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < n) {
    std::vector<double> sorted(weight);
    std::nth_element(sorted.begin(), sorted.begin() + (params.top_k - 1), sorted.end(), std::greater<>());
    double threshold = sorted[params.top_k - 1];
    // Ties at the threshold are kept in id order until k tokens are kept.
    size_t above = std::count_if(weight.begin(), weight.end(), [&](double w) { return w > threshold; });
    size_t ties_left = params.top_k - above;
    for (auto& w : weight) {
      if (w > threshold) continue;
      if (w == threshold && ties_left > 0) {
        --ties_left;
        continue;
      }
      w = 0.0;
    }
  }
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (double w : weight) total += w;
    std::vector<int32_t> order;
    for (size_t i = 0; i < n; ++i)
      if (weight[i] > 0.0) order.push_back(static_cast<int32_t>(i));
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return weight[a] > weight[b]; });
    double cumulative = 0.0;
    size_t keep = 0;
    while (keep < order.size()) {
      cumulative += weight[order[keep++]];
      if (cumulative >= params.top_p * total) break;
    }
    for (size_t j = keep; j < order.size(); ++j) weight[order[j]] = 0.0;
  }
  if (params.min_p > 0.0f) {
    double largest = *std::max_element(weight.begin(), weight.end());
    for (auto& w : weight)
      if (w < params.min_p * largest) w = 0.0;
  }
  return weight;
}

int32_t sample_from_weights(std::span<const double> weight, double uniform) {
  double total = 0.0;
  for (double w : weight) total += w;
  double target = uniform * total;
  double cumulative = 0.0;
  int32_t last_kept = 0;
  for (size_t i = 0; i < weight.size(); ++i) {
    if (weight[i] == 0.0) continue;
    cumulative += weight[i];
    last_kept = static_cast<int32_t>(i);
    if (cumulative > target) return last_kept;
  }
  return last_kept;  // rounding left target at the very end
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sample_index) {
  if (params.greedy()) return argmax(logits);
  return sample_from_weights(filtered_weights(logits, params), sampling_uniform(params.seed, sample_index));
}

}  // namespace moeserve
