#include "runner/cuda/eagle3_device_weights.h"

#include <algorithm>
#include <cmath>

#include "runner/cuda/device_weights.h"
#include "runner/cuda/kernels.h"
#include "util/error.h"

namespace moeserve::cuda {

void* Eagle3DeviceWeights::allocate(size_t n) {
  buffers_.emplace_back(n);
  bytes += n;
  return buffers_.back().get();
}

Eagle3DeviceWeights Eagle3DeviceWeights::upload(const speculative::Eagle3Checkpoint& head,
                                                const speculative::Eagle3Target& target) {
  const speculative::Eagle3Weights& w = head.weights();
  Eagle3DeviceWeights d;
  auto put = [&](const void* host, size_t n) {
    void* device = d.allocate(n);
    MOESERVE_CUDA_CHECK(cudaMemcpy(device, host, n, cudaMemcpyHostToDevice));
    return device;
  };
  auto put_floats = [&](const std::vector<float>& v) {
    return v.empty() ? nullptr : static_cast<const float*>(put(v.data(), v.size() * 4));
  };
  auto put_dense = [&](std::vector<const Matrix*> parts) {
    const std::vector<uint8_t> bytes = dense_rows(parts, Precision::bf16);
    return put(bytes.data(), bytes.size());
  };
  d.fc = put_dense({&w.fc});
  d.input_norm = put_floats(w.input_norm);
  d.hidden_norm = put_floats(w.hidden_norm);
  d.input_layernorm = put_floats(w.input_layernorm);
  d.post_attention_layernorm = put_floats(w.post_attention_layernorm);
  d.final_norm = put_floats(w.final_norm);
  d.qkv = put_dense({&w.q, &w.k, &w.v});
  d.o = put_dense({&w.o});
  d.gate_up = put_dense({&w.gate, &w.up});
  d.down = put_dense({&w.down});
  d.lm_head = put_dense({w.lm_head ? &*w.lm_head : &target.unembedding});
  d.embedding = put_dense({w.embed_tokens ? &*w.embed_tokens : &target.embedding});
  if (!w.d2t.empty()) {
    d.d2t_host.assign(w.d2t.begin(), w.d2t.end());
    d.d2t = static_cast<const int32_t*>(put(d.d2t_host.data(), d.d2t_host.size() * 4));
  }
  return d;
}

speculative::Eagle3Config synthetic_eagle3_config(int target_hidden, int target_vocab, int target_layers) {
  speculative::Eagle3Config c;
  c.hidden_size = target_hidden;
  c.intermediate_size = 6 * target_hidden;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.rms_norm_eps = 1e-5;
  c.rope.theta = 500000.0;
  c.max_position_embeddings = 131072;
  c.vocab_size = target_vocab;
  c.draft_vocab_size = std::min(32000, target_vocab);
  c.target_hidden_size = target_hidden;
  c.aux_layer_ids = speculative::default_aux_layer_ids(target_layers);
  return c;
}

Eagle3DeviceWeights Eagle3DeviceWeights::synthetic(const speculative::Eagle3Config& c, uint64_t seed) {
  Eagle3DeviceWeights d;
  uint64_t key = seed * 0x100000001b3ull;
  // Weights of standard deviation 1 / sqrt(fan_in): unit-RMS inputs give unit-scale outputs. Norm scales near 1.
  auto matrix = [&](int64_t rows, int64_t cols) {
    void* m = d.allocate(rows * cols * 2);
    launch_fill_uniform(nullptr, Precision::bf16, m, rows * cols, ++key, 0.0f,
                        static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols))));
    return m;
  };
  auto norm = [&](int64_t n) {
    auto* v = static_cast<float*>(d.allocate(n * 4));
    launch_fill_uniform(nullptr, Precision::f32, v, n, ++key, 1.0f, 0.05f);
    return v;
  };
  const int64_t H = c.hidden_size;
  d.fc = matrix(H, c.feature_width());
  d.hidden_norm = norm(H);
  d.input_layernorm = norm(H);
  d.post_attention_layernorm = norm(H);
  d.final_norm = norm(H);
  d.qkv = matrix(c.q_dim() + 2 * c.kv_dim(), 2 * H);
  d.o = matrix(H, c.q_dim());
  d.gate_up = matrix(2 * static_cast<int64_t>(c.intermediate_size), H);
  d.down = matrix(H, c.intermediate_size);
  d.lm_head = matrix(c.draft_vocab_size, H);
  d.embedding = matrix(c.vocab_size, H);
  // Draft ids spread evenly over the target vocabulary, as offsets.
  std::vector<int32_t> d2t(c.draft_vocab_size);
  for (int32_t i = 0; i < c.draft_vocab_size; ++i)
    d2t[i] = static_cast<int32_t>(static_cast<int64_t>(i) * c.vocab_size / c.draft_vocab_size) - i;
  auto* table = static_cast<int32_t*>(d.allocate(d2t.size() * 4));
  MOESERVE_CUDA_CHECK(cudaMemcpy(table, d2t.data(), d2t.size() * 4, cudaMemcpyHostToDevice));
  d.d2t = table;
  d.d2t_host = std::move(d2t);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

}  // namespace moeserve::cuda
