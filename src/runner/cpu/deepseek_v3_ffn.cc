#include "runner/cpu/deepseek_v3_ffn.h"

#include <algorithm>
#include <vector>

#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cpu/ops.h"

namespace moeserve::cpu {

void mlp(ThreadPool& pool, const deepseek_v3::Mlp& m, const float* x, int64_t T, float* out) {
  const int64_t I = m.gate.rows();
  std::vector<float> gate(T * I), up(T * I);
  linear(pool, x, T, m.gate, gate.data());
  linear(pool, x, T, m.up, up.data());
  silu_mul(gate.data(), up.data(), T * I);
  linear(pool, gate.data(), T, m.down, out);
}

void feed_forward(ThreadPool& pool, const deepseek_v3::Config& c, const deepseek_v3::Layer& layer, const float* x,
                  int64_t T, float* out, const ExpertShare& share) {
  if (!layer.moe) return mlp(pool, layer.dense, x, T, out);
  const int64_t H = c.hidden_size;
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  // The router in fp32 (transformers casts both sides to float32).
  std::vector<float> logits(T * E);
  linear(pool, x, T, layer.router, nullptr, logits.data());
  std::vector<int32_t> chosen(T * K);
  std::vector<float> weights(T * K);
  for (int64_t t = 0; t < T; ++t)
    route_noaux_tc(logits.data() + t * E, layer.router_bias.data(), c, chosen.data() + t * K, weights.data() + t * K);

  // Each expert once over its (token, slot) pairs.
  std::vector<std::vector<int64_t>> assigned(E);
  for (int64_t i = 0; i < T * K; ++i) assigned[chosen[i]].push_back(i);
  std::vector<float> expert_out(T * K * H), gathered, y;
  const int first = std::max(share.first_expert, 0), end = std::min(share.end_expert, E);
  for (int e = first; e < end; ++e) {
    const auto& slots = assigned[e];
    const int64_t n = static_cast<int64_t>(slots.size());
    if (n == 0) continue;
    gathered.resize(n * H);
    for (int64_t j = 0; j < n; ++j) std::copy_n(x + (slots[j] / K) * H, H, gathered.data() + j * H);
    y.resize(n * H);
    mlp(pool, layer.experts[e], gathered.data(), n, y.data());
    for (int64_t j = 0; j < n; ++j) std::copy_n(y.data() + j * H, H, expert_out.data() + slots[j] * H);
  }
  std::fill(out, out + T * H, 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < K; ++j) {
      if (chosen[t * K + j] < first || chosen[t * K + j] >= end) continue;
      const float w = weights[t * K + j];
      const float* expert = expert_out.data() + (t * K + j) * H;
      for (int64_t i = 0; i < H; ++i) out[t * H + i] += expert[i] * w;
    }
  if (!layer.shared || !share.shared) return;
  std::vector<float> shared(T * H);
  mlp(pool, *layer.shared, x, T, shared.data());
  for (int64_t i = 0; i < T * H; ++i) out[i] += shared[i];
}

}  // namespace moeserve::cpu
