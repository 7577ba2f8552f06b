#include "runner/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/mxfp4.h"
#include "runner/cpu/dot.h"
#include "runner/cpu/row_loops.h"
#include "util/bfloat16.h"

namespace moeserve::cpu {

void rms_norm(const float* x, const float* scale, int64_t T, int64_t H, double eps, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * H;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < H; ++i) sum += row[i] * row[i];
    float inv = 1.0f / std::sqrt(sum / static_cast<float>(H) + static_cast<float>(eps));
    float* dst = out + t * H;
    for (int64_t i = 0; i < H; ++i) dst[i] = row[i] * inv * scale[i];
  }
}

void linear(ThreadPool& pool, const float* x, int64_t T, const Matrix& W, const float* bias, float* y) {
  const int64_t K = W.cols;
  if (T < kDirectTokens) {
    if (W.dtype == DType::F32)
      rows_times_tokens(pool, T, W.rows, bias, y, [&](int64_t n, int64_t t) {
        return dot_f32(x + t * K, reinterpret_cast<const float*>(W.row(n)), K);
      });
    else
      rows_times_tokens(pool, T, W.rows, bias, y, [&](int64_t n, int64_t t) {
        return dot_bf16(x + t * K, reinterpret_cast<const uint16_t*>(W.row(n)), K);
      });
    return;
  }
  blocked_rows_times_tokens(
      pool, T, W.rows, K, bias, y,
      [&](int64_t n0, int64_t rows, float* buffer) {
        for (int64_t r = 0; r < rows; ++r) {
          if (W.dtype == DType::F32) {
            std::copy_n(reinterpret_cast<const float*>(W.row(n0 + r)), K, buffer + r * K);
          } else {
            const auto* src = reinterpret_cast<const uint16_t*>(W.row(n0 + r));
            for (int64_t k = 0; k < K; ++k) buffer[r * K + k] = bf16_to_float(src[k]);
          }
        }
      },
      [&](const float* row, int64_t t) { return dot_f32(x + t * K, row, K); });
}

void expert_linear(ThreadPool& pool, const float* x, int64_t T, const ExpertMatrix& W, int64_t expert, float* y) {
  const int64_t N = W.out_features, K = W.in_features;
  const float* bias = W.bias.data() + expert * N;
  if (W.format == ExpertFormat::mxfp4) {
    // Activations split into even and odd elements once per call (the MXFP4 lane layout, dot.h).
    std::vector<float> split(T * K);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K / 2; ++k) {
        split[t * K + k] = x[t * K + 2 * k];
        split[t * K + K / 2 + k] = x[t * K + 2 * k + 1];
      }
    auto activation = [&](int64_t t) { return Mxfp4Activation{split.data() + t * K, split.data() + t * K + K / 2}; };
    const int64_t row_blocks = K / kMxfp4BlockSize;
    const uint8_t* blocks = W.blocks + expert * N * row_blocks * kMxfp4BlockBytes;
    const uint8_t* scales = W.scales + expert * N * row_blocks;
    if (T < kDirectTokens) {
      rows_times_tokens(pool, T, N, bias, y, [&](int64_t n, int64_t t) {
        return dot_mxfp4(activation(t), blocks + n * row_blocks * kMxfp4BlockBytes, scales + n * row_blocks, K);
      });
      return;
    }
    const int64_t row_floats = K + row_blocks;  // even, odd, scales
    blocked_rows_times_tokens(
        pool, T, N, row_floats, bias, y,
        [&](int64_t n0, int64_t rows, float* buffer) {
          for (int64_t r = 0; r < rows; ++r) {
            float* row = buffer + r * row_floats;
            expand_mxfp4_row(blocks + (n0 + r) * row_blocks * kMxfp4BlockBytes, scales + (n0 + r) * row_blocks, K, row,
                             row + K / 2, row + K);
          }
        },
        [&](const float* row, int64_t t) {
          return dot_mxfp4_expanded(activation(t), Mxfp4ExpandedRow{row, row + K / 2, row + K}, K);
        });
    return;
  }
  // Dense [E, in, out]: output columns are strided in memory, so rows of W are accumulated into a block of outputs
  // (a different summation order from the row-dot layouts; the order is still fixed per token).
  constexpr int64_t kColumnBlock = 256;
  const int64_t blocks = (N + kColumnBlock - 1) / kColumnBlock;
  pool.parallel_for(blocks, 1, [&](size_t b0, size_t b1) {
    thread_local std::vector<float> w;
    for (size_t b = b0; b < b1; ++b) {
      const int64_t n0 = static_cast<int64_t>(b) * kColumnBlock;
      const int64_t cols = std::min(kColumnBlock, N - n0);
      w.resize(cols);
      for (int64_t t = 0; t < T; ++t) {
        float* yt = y + t * N + n0;
        for (int64_t j = 0; j < cols; ++j) yt[j] = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t row = expert * K + k;
          if (W.dense.dtype == DType::F32) {
            std::copy_n(reinterpret_cast<const float*>(W.dense.row(row)) + n0, cols, w.data());
          } else {
            const auto* src = reinterpret_cast<const uint16_t*>(W.dense.row(row)) + n0;
            for (int64_t j = 0; j < cols; ++j) w[j] = bf16_to_float(src[j]);
          }
          const float xk = x[t * K + k];
          for (int64_t j = 0; j < cols; ++j) yt[j] = std::fma(xk, w[j], yt[j]);
        }
        for (int64_t j = 0; j < cols; ++j) yt[j] += bias[n0 + j];
      }
    }
  });
}

void apply_rope(float* x, int64_t T, int heads, int head_dim, const int32_t* positions, std::span<const float> inv_freq,
                float concentration) {
  const int half = head_dim / 2;
  std::vector<float> cos_table(half), sin_table(half);
  for (int64_t t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      // fp32 angle as transformers computes it: position * inv_freq in float.
      float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_table[i] = std::cos(angle) * concentration;
      sin_table[i] = std::sin(angle) * concentration;
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * cos_table[i] - x2 * sin_table[i];
        v[i + half] = x2 * cos_table[i] + x1 * sin_table[i];
      }
    }
  }
}

void swiglu(const float* h, int64_t T, int64_t I, float alpha, float limit, float* out, SwigluCounters* counters) {
  uint64_t clamped = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < I; ++i) {
      float gate = h[t * 2 * I + 2 * i];
      float up = h[t * 2 * I + 2 * i + 1];
      clamped += (gate > limit) + (up > limit || up < -limit);
      gate = std::min(gate, limit);
      up = std::clamp(up, -limit, limit);
      float glu = gate / (1.0f + std::exp(-alpha * gate));
      out[t * I + i] = glu * (up + 1.0f);
    }
  }
  if (counters != nullptr) {
    counters->values += static_cast<uint64_t>(T * I * 2);
    counters->clamped += clamped;
  }
}

void route_top_k(const float* logits, int64_t T, int E, int k, int32_t* experts, float* weights) {
  std::vector<int32_t> order(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits + t * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    float m = row[order[0]];
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      experts[t * k + j] = order[j];
      weights[t * k + j] = std::exp(row[order[j]] - m);
      sum += weights[t * k + j];
    }
    for (int j = 0; j < k; ++j) weights[t * k + j] /= sum;
  }
}

}  // namespace moeserve::cpu
