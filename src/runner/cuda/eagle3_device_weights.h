// An EAGLE-3 draft head's weights in device memory: matrices bf16 (q, k, v fused into one [q + 2 kv, 2 hidden]
// matrix, gate and up into one [2 intermediate, hidden]), norm scales fp32, d2t as int32 offsets. Uploaded from a
// checkpoint (with the target's embedding, and its unembedding for a head without lm_head), or random values of
// a real shape made on the device.
#pragma once

#include <cstdint>
#include <vector>

#include "model/eagle3/checkpoint.h"
#include "runner/cpu/eagle3_drafter.h"
#include "runner/cuda/device_buffer.h"

namespace moeserve::cuda {

struct Eagle3DeviceWeights {
  static Eagle3DeviceWeights upload(const speculative::Eagle3Checkpoint& head, const speculative::Eagle3Target& target);
  static Eagle3DeviceWeights synthetic(const speculative::Eagle3Config& config, uint64_t seed);

  const void* fc = nullptr;             // [hidden, feature_width]
  const float* input_norm = nullptr;    // [feature_width], norm_before_fc only
  const float* hidden_norm = nullptr;   // [hidden]
  const float* input_layernorm = nullptr;
  const float* post_attention_layernorm = nullptr;
  const float* final_norm = nullptr;
  const void* qkv = nullptr;      // [q_dim + 2 kv_dim, 2 hidden]
  const void* o = nullptr;        // [hidden, q_dim]
  const void* gate_up = nullptr;  // [2 intermediate, hidden]
  const void* down = nullptr;     // [hidden, intermediate]
  const void* lm_head = nullptr;  // [draft_vocab, hidden]
  const void* embedding = nullptr;  // [vocab, hidden]
  const int32_t* d2t = nullptr;   // [draft_vocab]; null: identity
  std::vector<int32_t> d2t_host;  // the same offsets on the host (tree search maps its nodes' ids)
  size_t bytes = 0;

 private:
  void* allocate(size_t bytes);
  std::vector<DeviceBuffer> buffers_;
};

// The synthetic head's shape for a target: gpt-oss-120b's published EAGLE-3 geometry (hidden 2880,
// intermediate 17280 = 6 x hidden, 64 heads and 8 KV heads of 64, draft vocabulary 32000) with the target's
// hidden size and vocabulary, aux layers {1, N/2 - 1, N - 4}, plain RoPE with theta 500000.
speculative::Eagle3Config synthetic_eagle3_config(int target_hidden, int target_vocab, int target_layers);

}  // namespace moeserve::cuda
