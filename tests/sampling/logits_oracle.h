// Oracles for logits processing and logprobs, written apart from the code under test (sampling/logits_processing,
// sampling/logprobs) and shared by the engine's and the server's tests: vLLM v1's sampler rules applied token by
// token, a long-double log-softmax, and the raw logits of every position from one CPU-runner forward.
#pragma once

#include <span>
#include <vector>

#include "sampling/logits_processing.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/runner.h"

namespace moeserve::testing {

// vLLM v1's order, token by token over the row: logit_bias, the ban of stop tokens (hold_stops: min_tokens not
// reached), repetition over prompt and output (positive logits divided, negative multiplied), then frequency
// (times the output count) and presence (once if in the output) subtracted.
std::vector<float> oracle_edit(std::vector<float> logits, const LogitsProcessing& p, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& output, bool hold_stops, const std::vector<int32_t>& stops);

std::vector<long double> log_softmax(std::span<const float> logits);

// The raw logits at every position of `tokens` (row i predicts token i + 1), from one forward of a runner whose KV
// cache this allocates (a fresh one: not yet allocated), or of a CPU runner of its own over the GPT-OSS checkpoint.
std::vector<std::vector<float>> logits_at_every_position(ModelRunner& runner, const std::vector<int32_t>& tokens);
std::vector<std::vector<float>> logits_at_every_position(std::shared_ptr<const Checkpoint> checkpoint,
                                                         const std::vector<int32_t>& tokens);

}  // namespace moeserve::testing
