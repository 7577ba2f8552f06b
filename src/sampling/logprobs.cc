#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace moeserve {

double log_sum_exp(std::span<const float> logits) {
  float max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max(max_logit, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max_logit));
  return static_cast<double>(max_logit) + std::log(sum);
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_k) {
  const auto vocab = static_cast<int64_t>(logits.size());
  MOESERVE_CHECK(token >= 0 && token < vocab, "logprob of token {} outside the vocabulary of {}", token, vocab);
  MOESERVE_CHECK(top_k >= 0 && top_k <= kMaxTopLogprobs && top_k <= vocab, "top logprobs {} must be in [0, {}]", top_k,
                 kMaxTopLogprobs);
  const double lse = log_sum_exp(logits);
  auto logprob = [&](int32_t t) { return static_cast<float>(static_cast<double>(logits[t]) - lse); };
  TokenLogprobs out;
  out.chosen = {token, logprob(token)};
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) ids[i] = i;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), better);
  for (int i = 0; i < top_k; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

}  // namespace moeserve
