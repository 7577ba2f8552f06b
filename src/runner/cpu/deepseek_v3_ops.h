// The CPU reference of each DeepSeek-V3 operation besides attention (runner/cpu/mla.h): projections over FP8
// block-scaled or bf16/f32 weights, the adjacent-pair RoPE, SwiGLU without clamp, and the noaux_tc router. fp32
// arithmetic on weights dequantised exactly in the inner loops (the weights stay FP8 in memory); every dot product
// in dot.h's lane order, so a token's result is the same bits in any batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/weights.h"
#include "util/thread_pool.h"

namespace moeserve::cpu {

// y[T, W.rows()] = x[T, W.cols()] W^T for an FP8 block-scaled or bf16/f32 weight.
void linear(ThreadPool& pool, const float* x, int64_t T, const deepseek_v3::Linear& W, float* y);
// One row of W dotted with x (W.cols() floats), in the same order as linear's.
float row_dot(const deepseek_v3::Linear& W, int64_t row, const float* x);
// acc[c] = fma(a, W[row, c], acc[c]) for every column c (a row of W^T x, accumulated row by row).
void add_scaled_row(const deepseek_v3::Linear& W, int64_t row, float a, float* acc);

// DeepSeek's RoPE on `heads` vectors of rope_dim values (head h at x + h * stride) at a position: pairs of adjacent
// values (x[2j], x[2j+1]) rotated by position * inv_freq[j] (inference/model.py apply_rotary_emb, the checkpoint's
// layout; transformers reaches the same products with rope_interleave), cos and sin times attention_factor. The
// angle is fp32.
void rope_adjacent_pairs(float* x, int heads, int64_t stride, int rope_dim, int32_t position,
                         std::span<const float> inv_freq, float attention_factor);

// h[T, I] = silu(gate[T, I]) * up[T, I], silu(g) = g * sigmoid(g), in place into gate.
void silu_mul(float* gate, const float* up, int64_t n);

// The noaux_tc router for one token (transformers' DeepseekV3TopkRouter, DeepSeek's Gate): scores s = sigmoid(u)
// of the router logits u; choice scores r = s + bias; groups of n_routed_experts / n_group experts scored by the
// sum of their two largest r; the topk_group best groups kept; among their experts the num_experts_per_tok largest
// r chosen; weights s_e / (sum of chosen s + 1e-20) (norm_topk_prob) times routed_scaling_factor. Ties go to the
// lower index. experts and weights have num_experts_per_tok entries, the experts in ascending order.
void route_noaux_tc(const float* logits, const float* bias, const deepseek_v3::Config& config, int32_t* experts,
                    float* weights);

}  // namespace moeserve::cpu
