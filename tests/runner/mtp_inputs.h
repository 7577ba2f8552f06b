// Drafter inputs for DeepSeek's MTP head from real target states: a token sequence run through the CPU target
// runner (the residual streams after its last layer, the head's features), and slices of it as DraftInputs. Shared
// by the CPU head's tests (mtp_drafter_test.cc) and the GPU head's (cuda/deepseek_mtp_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/drafter.h"
#include "runner/sequence_step.h"

namespace moeserve::testing {

// Positions [0, n] of a sequence: random tokens at [0, n) (ids below 1,024), then the target's greedy token at n;
// the target's residual streams after its last layer at [0, n).
struct VerifiedTokens {
  std::vector<int32_t> tokens;
  std::vector<float> features;  // [n, hidden]
};

// n < 128 (the target's KV: 8 blocks of 16).
inline VerifiedTokens verified_tokens(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, int n,
                                      uint32_t seed) {
  std::mt19937 rng(seed);
  VerifiedTokens v;
  for (int i = 0; i < n; ++i) v.tokens.push_back(static_cast<int32_t>(rng() % 1024));
  DeepseekV3CpuRunner runner(std::move(checkpoint), 2);
  runner.allocate_kv_cache({16, 8});
  const std::vector<std::vector<int32_t>> table{{0, 1, 2, 3, 4, 5, 6, 7}};
  ForwardBatch batch;
  batch.sequences.push_back(sequence_step(v.tokens, 0, table, 1));
  batch.capture_layers = {runner.config().num_layers - 1};
  ForwardOutput out;
  runner.forward(batch, out);
  v.features = out.captured[0];
  v.tokens.push_back(static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.end()) - out.logits.begin()));
  return v;
}

// Positions [start, end) of v as one drafter input of sequence `id` (hidden: the target's hidden size).
inline speculative::DraftInput draft_input(const VerifiedTokens& v, int64_t hidden, uint64_t id, int start, int end,
                                           speculative::DraftShape shape) {
  speculative::DraftInput in;
  in.sequence_id = id;
  in.start_position = start;
  in.start_token = v.tokens[start];
  in.features = std::span(v.features).subspan(start * hidden, (end - start) * hidden);
  in.next_tokens = std::span(v.tokens).subspan(start + 1, end - start);
  in.shape = shape;
  return in;
}

}  // namespace moeserve::testing
