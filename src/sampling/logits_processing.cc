#include "sampling/logits_processing.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace moeserve {

void validate_logits_processing(const LogitsProcessing& p, int64_t vocab) {
  MOESERVE_CHECK(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f, "presence_penalty {} must be in [-2, 2]",
                 p.presence_penalty);
  MOESERVE_CHECK(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f,
                 "frequency_penalty {} must be in [-2, 2]", p.frequency_penalty);
  MOESERVE_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f,
                 "repetition_penalty {} must be greater than 0", p.repetition_penalty);
  MOESERVE_CHECK(p.min_tokens >= 0, "min_tokens {} must be >= 0", p.min_tokens);
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto [token, bias] = p.logit_bias[i];
    MOESERVE_CHECK(token >= 0 && token < vocab, "logit_bias token {} is outside the vocabulary of {}", token, vocab);
    MOESERVE_CHECK(i == 0 || p.logit_bias[i - 1].first < token, "logit_bias tokens must be ascending and distinct");
    MOESERVE_CHECK(bias >= -100.0f && bias <= 100.0f, "logit_bias of token {} is {}; it must be in [-100, 100]", token,
                   bias);
  }
}

TokenHistory::TokenHistory(std::span<const int32_t> prompt) : prompt_(prompt.begin(), prompt.end()) {
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

std::vector<LogitEdit> logit_edits(const LogitsProcessing& p, const TokenHistory& history,
                                   std::span<const int32_t> banned) {
  std::map<int32_t, LogitEdit> edits;
  auto at = [&](int32_t token) -> LogitEdit& {
    LogitEdit& e = edits[token];
    e.token = token;
    return e;
  };
  for (const auto& [token, bias] : p.logit_bias) at(token).bias = bias;
  for (int32_t token : banned) at(token).bias = -INFINITY;
  if (p.repetition_penalty != 1.0f) {
    for (int32_t token : history.prompt_tokens()) at(token).repetition = p.repetition_penalty;
    for (const auto& [token, count] : history.output_counts()) at(token).repetition = p.repetition_penalty;
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    for (const auto& [token, count] : history.output_counts())
      at(token).subtract = p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
  std::vector<LogitEdit> out;
  out.reserve(edits.size());
  for (const auto& [token, e] : edits) out.push_back(e);
  return out;
}

void apply_logit_edits(std::span<float> logits, std::span<const LogitEdit> edits, std::span<const uint32_t> allowed) {
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const LogitEdit& e : edits) {
    MOESERVE_CHECK(e.token >= 0 && e.token < vocab, "logit edit of token {} outside the vocabulary of {}", e.token,
                   vocab);
    logits[e.token] = edited_logit(logits[e.token], e);
  }
  if (allowed.empty()) return;
  MOESERVE_CHECK(static_cast<int64_t>(allowed.size()) * 32 >= vocab, "allowed-token mask of {} words for {} tokens",
                 allowed.size(), vocab);
  for (int64_t t = 0; t < vocab; ++t)
    if (!token_allowed(allowed.data(), static_cast<int32_t>(t))) logits[t] = -INFINITY;
}

}  // namespace moeserve
