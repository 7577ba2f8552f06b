// Log-probabilities of tokens as vLLM reports them by default ("raw_logprobs"): the log-softmax of the model's
// own logits, before logit_bias, penalties, masks, temperature or any filter. One row gives the chosen token's
// value (the sampled one, or for prompt logprobs the prompt's next token) and the top k of the row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/logit_edit.h"  // kMaxTopLogprobs

namespace moeserve {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; equal values by ascending id
};

// log(sum(exp(logits))), in double over (x - max) as the sampler weighs tokens.
double log_sum_exp(std::span<const float> logits);
// The row's log-softmax at `token` and its top_k (0 <= top_k <= kMaxTopLogprobs) tokens.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top_k);

}  // namespace moeserve
