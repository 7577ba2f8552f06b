// What a request changes in its logits before a token is drawn (logit_edit.h has the order of the steps): vLLM's
// logit_bias, min_tokens, repetition / frequency / presence penalties, and the allowed-token mask of constrained
// decoding. The engine turns a sequence's history into one sparse list of LogitEdit per sampled row; both
// runners apply it (CPU: apply_logit_edits, the reference; CUDA: runner/cuda/logit_edits.cu), so sampling stays a
// pure function of (logits, edits, params, seed, sample index): seeds reproduce in any batch.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "sampling/logit_edit.h"

namespace moeserve {

struct LogitsProcessing {
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1 is off
  std::vector<std::pair<int32_t, float>> logit_bias;  // token, bias in [-100, 100]; ascending unique tokens
  int min_tokens = 0;  // the request's stop tokens are banned until this many tokens were generated

  bool penalises() const { return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f; }
  bool active() const { return penalises() || !logit_bias.empty() || min_tokens > 0; }
};

// Fails naming the field when a value is out of range or a token is outside the vocabulary.
void validate_logits_processing(const LogitsProcessing& p, int64_t vocab);

// The tokens a sequence's penalties count: the prompt's distinct tokens and every output token's count.
class TokenHistory {
 public:
  TokenHistory() = default;
  explicit TokenHistory(std::span<const int32_t> prompt);
  void add_output(int32_t token) { ++output_counts_[token]; }
  const std::vector<int32_t>& prompt_tokens() const { return prompt_; }   // ascending, distinct
  const std::map<int32_t, int>& output_counts() const { return output_counts_; }

 private:
  std::vector<int32_t> prompt_;
  std::map<int32_t, int> output_counts_;
};

// The edits of one sampled row, ascending by token with one entry per token (so a GPU thread per entry writes
// its own logit). banned: tokens forced to -inf (min_tokens' stop tokens), any order.
std::vector<LogitEdit> logit_edits(const LogitsProcessing& p, const TokenHistory& history,
                                   std::span<const int32_t> banned);

// The reference: edits applied to a row in place, then every token outside `allowed` (when not empty: one bit
// per token, token_allowed()) set to -inf.
void apply_logit_edits(std::span<float> logits, std::span<const LogitEdit> edits, std::span<const uint32_t> allowed);

}  // namespace moeserve
