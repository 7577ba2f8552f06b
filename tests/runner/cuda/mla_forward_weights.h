// cpu::MlaAttention::forward's weights for checking an MLA attention kernel between its two projections: q_proj
// instead of q_lora (q = x W_q^T, forward's own call, which a test repeats for the kernel's q), kv_a random,
// kv_a_norm ones, a random kv_b (KvbWeight) and o_proj the identity (hidden = heads * v_head_dim), so forward's
// output is the heads' outputs [R, heads * v_head_dim]. Used by mla_prefill_test.cc; mla_decode_test.cc's
// absorb -> decode -> un-absorb test builds the same weights inline and could take this instead.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "mla_test_util.h"
#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/weights.h"

namespace moeserve::testing {

struct MlaForwardWeights {
  deepseek_v3::Config config;  // the widths' with `heads` heads, q_lora_rank 0, hidden_size heads * v_head_dim
  std::vector<float> q_w, kv_a_w, o_w;
  KvbWeight kv_b;
  deepseek_v3::Attention w;

  MlaForwardWeights(std::mt19937& rng, const deepseek_v3::Config& widths, int heads, cuda::MlaWeightType kv_b_type)
      : config(with_heads(widths, heads)), kv_b(rng, config, kv_b_type) {
    const int64_t hidden = config.hidden_size, q_rows = static_cast<int64_t>(heads) * config.qk_head_dim(),
                  kv_a_rows = config.latent_width();
    const float x_std = 1.0f / std::sqrt(static_cast<float>(hidden));
    q_w = random_floats(rng, static_cast<size_t>(q_rows * hidden), 0, x_std);
    kv_a_w = random_floats(rng, static_cast<size_t>(kv_a_rows * hidden), 0, x_std);
    o_w.assign(static_cast<size_t>(hidden * hidden), 0.0f);
    for (int64_t i = 0; i < hidden; ++i) o_w[static_cast<size_t>(i * hidden + i)] = 1.0f;
    w.q = f32_matrix(q_w, q_rows, hidden);
    w.kv_a = f32_matrix(kv_a_w, kv_a_rows, hidden);
    w.kv_a_norm.assign(config.kv_lora_rank, 1.0f);
    w.kv_b = kv_b.linear;
    w.o = f32_matrix(o_w, hidden, hidden);
  }

 private:
  static deepseek_v3::Config with_heads(deepseek_v3::Config c, int heads) {
    c.num_heads = heads;
    c.q_lora_rank = 0;
    c.hidden_size = heads * c.v_head_dim;
    return c;
  }
  static deepseek_v3::Linear f32_matrix(const std::vector<float>& values, int64_t rows, int64_t cols) {
    deepseek_v3::Linear l;
    l.dense = Matrix{DType::F32, reinterpret_cast<const uint8_t*>(values.data()), rows, cols};
    return l;
  }
};

}  // namespace moeserve::testing
