// The CPU reference implementation of each GPT-OSS operation. These functions are the reference that the
// CUDA kernels are tested against; the CPU runner composes them into the forward pass. fp32 arithmetic on
// weights converted exactly from bf16 / MXFP4 in the inner loops.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace moeserve::cpu {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * scale, for T rows of width H (in place allowed).
void rms_norm(const float* x, const float* scale, int64_t T, int64_t H, double eps, float* out);

// y[T, N] = x[T, K] W[N, K]^T + bias (bias may be null).
void linear(ThreadPool& pool, const float* x, int64_t T, const Matrix& W, const float* bias, float* y);

// y[T, out] = x[T, in] W_e^T + b_e for one expert of an MXFP4 or dense expert matrix.
void expert_linear(ThreadPool& pool, const float* x, int64_t T, const ExpertMatrix& W, int64_t expert, float* y);

// Rotates T rows of `heads` heads in place by YaRN RoPE (half split: pairs (i, i + head_dim/2)), with cos and sin
// scaled by the concentration, at each row's position.
void apply_rope(float* x, int64_t T, int heads, int head_dim, const int32_t* positions, std::span<const float> inv_freq,
                float concentration);

// SwiGLU with clamp over interleaved gate/up rows: h[T, 2I] -> out[T, I]. Counts values that hit the clamp.
struct SwigluCounters {
  std::atomic<uint64_t> values{0};
  std::atomic<uint64_t> clamped{0};
};
void swiglu(const float* h, int64_t T, int64_t I, float alpha, float limit, float* out, SwigluCounters* counters);

// Top-k of router logits (descending, lower id first on ties) and the softmax over the selected logits.
void route_top_k(const float* logits, int64_t T, int E, int k, int32_t* experts, float* weights);

// Attention of one query token against cached keys/values, with a learned sink per head:
// o = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink - m)), s_j = scale * q.k_j, m = max(s, sink).
// keys(j) and values(j) return pointers to head_dim floats for j in [0, n). q and out hold one head.
template <typename KeyFn, typename ValueFn>
void attend_one_head(const float* q, int head_dim, int64_t n, KeyFn keys, ValueFn values, float sink, float scale,
                     float* scores, float* out) {
  float m = sink;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys(j);
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int d = 0; d < head_dim; ++d) dot += q[d] * k[d];
    scores[j] = dot * scale;
    m = std::max(m, scores[j]);
  }
  float denominator = std::exp(sink - m);
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    float p = std::exp(scores[j] - m);
    denominator += p;
    const float* v = values(j);
#pragma omp simd
    for (int d = 0; d < head_dim; ++d) out[d] += p * v[d];
  }
  float inv = 1.0f / denominator;
  for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace moeserve::cpu
