// One token's logit change before sampling, one definition for the host and the GPU (runner/cuda/logit_edits.cu
// includes this; it compiles as C++17 under nvcc, hence no <span> here). vLLM v1's sampler order: logit_bias and
// min_tokens (non-argmax-invariant logits processors) first, then the penalties: repetition (vLLM and
// transformers: a positive logit divided by the penalty, a negative one multiplied, over prompt and output
// tokens), then frequency (times the token's count in the output) and presence (once if it occurs in the output)
// subtracted. A banned token (min_tokens holding back a stop token) has bias -inf, which every later step keeps.
#pragma once

#include <cstdint>

#include "util/host_device.h"

namespace moeserve {

// The most top logprobs a token may ask for: OpenAI's bound for chat top_logprobs, and vLLM's default
// --max-logprobs.
inline constexpr int kMaxTopLogprobs = 20;

struct LogitEdit {
  int32_t token = 0;
  float bias = 0.0f;        // added first (logit_bias; -inf bans the token)
  float repetition = 1.0f;  // repetition_penalty where the token is in the prompt or the output, else 1
  float subtract = 0.0f;    // frequency_penalty * output count + presence_penalty * (count > 0)
};

// Each step rounded on its own on both sides: the GPU's multiply is kept from fusing with the subtraction (nvcc
// contracts a * b - c into an FMA by default), so edited logits are bitwise the CPU's.
MOESERVE_HOST_DEVICE inline float edited_logit(float x, const LogitEdit& e) {
  float y = x + e.bias;
#if defined(__CUDA_ARCH__)
  if (e.repetition != 1.0f) y = y > 0.0f ? __fdiv_rn(y, e.repetition) : __fmul_rn(y, e.repetition);
#else
  if (e.repetition != 1.0f) y = y > 0.0f ? y / e.repetition : y * e.repetition;
#endif
  return y - e.subtract;
}

// The allowed-token mask of constrained decoding: bit (token % 32) of word token / 32.
MOESERVE_HOST_DEVICE inline bool token_allowed(const uint32_t* mask, int32_t token) {
  return (mask[token >> 5] >> (token & 31)) & 1u;
}

}  // namespace moeserve
