#include "runner/cpu/deepseek_v3_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runner/cpu/dot.h"
#include "runner/cpu/dot_fp8.h"
#include "runner/cpu/ops.h"
#include "runner/cpu/row_loops.h"

namespace moeserve::cpu {

void linear(ThreadPool& pool, const float* x, int64_t T, const deepseek_v3::Linear& W, float* y) {
  if (!W.is_fp8) return linear(pool, x, T, W.dense, nullptr, y);
  const Fp8BlockMatrix& m = W.fp8;
  const int64_t K = m.cols;
  if (T < kDirectTokens) {
    rows_times_tokens(pool, T, m.rows, nullptr, y, [&](int64_t n, int64_t t) {
      return dot_fp8(x + t * K, m.row(n), m.row_scales(n), m.block_cols, K);
    });
    return;
  }
  blocked_rows_times_tokens(
      pool, T, m.rows, K, nullptr, y,
      [&](int64_t n0, int64_t rows, float* buffer) {
        for (int64_t r = 0; r < rows; ++r)
          expand_fp8_row(m.row(n0 + r), m.row_scales(n0 + r), m.block_cols, K, buffer + r * K);
      },
      [&](const float* row, int64_t t) { return dot_f32(x + t * K, row, K); });
}

float row_dot(const deepseek_v3::Linear& W, int64_t row, const float* x) {
  if (W.is_fp8) return dot_fp8(x, W.fp8.row(row), W.fp8.row_scales(row), W.fp8.block_cols, W.fp8.cols);
  if (W.dense.dtype == DType::F32) return dot_f32(x, reinterpret_cast<const float*>(W.dense.row(row)), W.dense.cols);
  return dot_bf16(x, reinterpret_cast<const uint16_t*>(W.dense.row(row)), W.dense.cols);
}

void add_scaled_row(const deepseek_v3::Linear& W, int64_t row, float a, float* acc) {
  const int64_t K = W.cols();
  if (W.is_fp8) {
    const auto& values = fp8_e4m3_values();
    const uint8_t* w = W.fp8.row(row);
    const float* scales = W.fp8.row_scales(row);
    for (int64_t k = 0; k < K; ++k) acc[k] = std::fma(a, values[w[k]] * scales[k / W.fp8.block_cols], acc[k]);
    return;
  }
  for (int64_t k = 0; k < K; ++k) acc[k] = std::fma(a, W.dense.at(row, k), acc[k]);
}

void rope_adjacent_pairs(float* x, int heads, int64_t stride, int rope_dim, int32_t position,
                         std::span<const float> inv_freq, float attention_factor) {
  const int pairs = rope_dim / 2;
  for (int j = 0; j < pairs; ++j) {
    // fp32 angle, as both references compute position * inv_freq.
    const float angle = static_cast<float>(position) * inv_freq[j];
    const float c = std::cos(angle) * attention_factor;
    const float s = std::sin(angle) * attention_factor;
    for (int h = 0; h < heads; ++h) {
      float* v = x + h * stride;
      const float x0 = v[2 * j], x1 = v[2 * j + 1];
      v[2 * j] = x0 * c - x1 * s;
      v[2 * j + 1] = x1 * c + x0 * s;
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void route_noaux_tc(const float* logits, const float* bias, const deepseek_v3::Config& c, int32_t* experts,
                    float* weights) {
  const int E = c.n_routed_experts, G = c.n_group, per_group = c.experts_per_group(), K = c.num_experts_per_tok;
  thread_local std::vector<float> scores, choice, group_score;
  thread_local std::vector<int32_t> order;
  scores.resize(E);
  choice.resize(E);
  for (int e = 0; e < E; ++e) {
    scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = scores[e] + bias[e];
  }
  // Group scores: the two largest choice scores of each group.
  group_score.resize(G);
  for (int g = 0; g < G; ++g) {
    float best = -std::numeric_limits<float>::infinity(), second = best;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (choice[e] > best) {
        second = best;
        best = choice[e];
      } else if (choice[e] > second) {
        second = choice[e];
      }
    }
    group_score[g] = best + second;
  }
  auto higher = [](const std::vector<float>& v) {
    return [&v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  };
  order.resize(G);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + c.topk_group, order.end(), higher(group_score));
  // Experts of dropped groups are out (DeepSeek's -inf; transformers' 0.0 fill agrees while choice scores are
  // positive, as they are for sigmoid scores plus a non-negative bias).
  std::vector<bool> kept(G, false);
  for (int i = 0; i < c.topk_group; ++i) kept[order[i]] = true;
  order.clear();
  for (int e = 0; e < E; ++e)
    if (kept[e / per_group]) order.push_back(e);
  std::partial_sort(order.begin(), order.begin() + K, order.end(), higher(choice));
  std::sort(order.begin(), order.begin() + K);
  float sum = 0.0f;
  for (int i = 0; i < K; ++i) sum += scores[order[i]];
  const float denominator = c.norm_topk_prob ? sum + 1e-20f : 1.0f;
  for (int i = 0; i < K; ++i) {
    experts[i] = order[i];
    weights[i] = scores[order[i]] / denominator * static_cast<float>(c.routed_scaling_factor);
  }
}

}  // namespace moeserve::cpu
