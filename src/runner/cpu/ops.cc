#include "runner/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/mxfp4.h"
#include "util/bfloat16.h"

namespace moeserve::cpu {
namespace {

void row_to_float(const Matrix& W, int64_t r, float* out) {
  if (W.dtype == DType::F32) {
    std::copy_n(reinterpret_cast<const float*>(W.row(r)), W.cols, out);
    return;
  }
  const auto* src = reinterpret_cast<const uint16_t*>(W.row(r));
#pragma omp simd
  for (int64_t k = 0; k < W.cols; ++k) out[k] = bf16_to_float(src[k]);
}

// Four dot products of one x row against four weight rows: x is read once for all four.
inline void dot4(const float* x, const float* w, int64_t K, float* acc) {
  const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K, *w3 = w + 3 * K;
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
  for (int64_t k = 0; k < K; ++k) {
    a0 += x[k] * w0[k];
    a1 += x[k] * w1[k];
    a2 += x[k] * w2[k];
    a3 += x[k] * w3[k];
  }
  acc[0] = a0;
  acc[1] = a1;
  acc[2] = a2;
  acc[3] = a3;
}

inline float dot(const float* x, const float* w, int64_t K) {
  float a = 0;
#pragma omp simd reduction(+ : a)
  for (int64_t k = 0; k < K; ++k) a += x[k] * w[k];
  return a;
}

// y[T, N] = x[T, K] rows(n)^T + bias, where fill_rows(n0, count, buffer) writes rows n0.. as floats.
// Rows are converted once per block of kRowBlock and then dotted with every token, four rows at a time.
template <typename FillRows>
void blocked_linear(ThreadPool& pool, const float* x, int64_t T, int64_t N, int64_t K, const float* bias, float* y,
                    FillRows fill_rows) {
  constexpr int64_t kRowBlock = 64;
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  pool.parallel_for(blocks, 1, [&](size_t b0, size_t b1) {
    thread_local std::vector<float> w;
    w.resize(kRowBlock * K);
    for (size_t b = b0; b < b1; ++b) {
      const int64_t n0 = static_cast<int64_t>(b) * kRowBlock;
      const int64_t rows = std::min(kRowBlock, N - n0);
      fill_rows(n0, rows, w.data());
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * K;
        float* yt = y + t * N + n0;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) dot4(xt, w.data() + r * K, K, yt + r);
        for (; r < rows; ++r) yt[r] = dot(xt, w.data() + r * K, K);
        if (bias != nullptr)
          for (int64_t j = 0; j < rows; ++j) yt[j] += bias[n0 + j];
      }
    }
  });
}

}  // namespace

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
  blocked_linear(pool, x, T, W.rows, W.cols, bias, y, [&](int64_t n0, int64_t rows, float* buffer) {
    for (int64_t r = 0; r < rows; ++r) row_to_float(W, n0 + r, buffer + r * W.cols);
  });
}

void expert_linear(ThreadPool& pool, const float* x, int64_t T, const ExpertMatrix& W, int64_t expert, float* y) {
  const int64_t N = W.out_features, K = W.in_features;
  const float* bias = W.bias.data() + expert * N;
  if (W.format == ExpertFormat::mxfp4) {
    const int64_t row_blocks = K / kMxfp4BlockSize;
    blocked_linear(pool, x, T, N, K, bias, y, [&](int64_t n0, int64_t rows, float* buffer) {
      for (int64_t r = 0; r < rows; ++r) {
        int64_t row = expert * N + n0 + r;
        mxfp4_dequantize_row(W.blocks + row * row_blocks * kMxfp4BlockBytes, W.scales + row * row_blocks, K,
                             buffer + r * K);
      }
    });
    return;
  }
  // Dense [E, in, out]: each output column is strided, so accumulate rows of W into a block of outputs.
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
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) w[j] = bf16_to_float(src[j]);
          }
          const float xk = x[t * K + k];
#pragma omp simd
          for (int64_t j = 0; j < cols; ++j) yt[j] += xk * w[j];
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
