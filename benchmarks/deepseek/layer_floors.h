// What one DeepSeek-V3 decoder layer's step must move and compute (its floors), term by term, from the model's
// config (model/deepseek_v3/config.h), for deepseek_layer_bench (benchmarks/cuda) and the 8-GPU projection
// (r1_projection.h). Byte terms count what must come from HBM at least once a step, whatever the kernels fuse:
//   weights: every FP8 matrix as N x K e4m3 bytes plus one fp32 scale per 128 x 128 block (the checkpoint's
//     format); the router gate in bf16 with its fp32 correction bias; norms (a few KB) left out;
//   the routed experts the step's tokens touch, each once; the shared expert once;
//   the latent KV: each sequence's cached rows read once, the step's own rows written once.
// Activations (the layer's input and output rows) are left out: they could stay on chip in a fused step.
// FLOP terms count multiply-adds x 2 of the step's tokens. The attention core has two exact forms of the same
// function (DeepSeek-V3's MLA): absorbed (the query moved into the 512-wide latent, MQA over latent + rope = 576
// wide keys; kv_b applied once per query token) and expanded (each key's k_nope and v made from its latent by
// kv_b once, then 192-wide scores and 128-wide values per head). The floor takes the cheaper: absorbed at decode,
// expanded at prefill.
#pragma once

#include <cstdint>

#include "model/deepseek_v3/config.h"

namespace moeserve::deepseek_bench {

// One step of a layer: `sequences` sequences, each bringing `tokens` causal tokens after `context` cached ones.
// Decode: tokens 1; a speculative verify step: tokens k + 1; prefill of fresh prompts: context 0.
struct LayerStep {
  int64_t sequences = 1;
  int64_t tokens = 1;
  int64_t context = 0;

  int64_t total_tokens() const { return sequences * tokens; }
  // (query, key) pairs the step's attention scores: sum over tokens of the keys each sees, itself included.
  double query_key_pairs() const;
};

// ---- Bytes ----
// An FP8 matrix [rows, cols]: e4m3 values and one fp32 scale per (128 x 128) block (the config's block size).
int64_t fp8_matrix_bytes(const deepseek_v3::Config& c, int64_t rows, int64_t cols);
// MLA's projections that every attention head shares (q_a, kv_a): a tensor-parallel split keeps them whole.
int64_t mla_shared_projection_bytes(const deepseek_v3::Config& c);
// MLA's projections split by heads (q_b, kv_b, o).
int64_t mla_head_projection_bytes(const deepseek_v3::Config& c);
inline int64_t attention_weight_bytes(const deepseek_v3::Config& c) {
  return mla_shared_projection_bytes(c) + mla_head_projection_bytes(c);
}
// One routed or shared expert: gate and up [moe_intermediate, hidden], down [hidden, moe_intermediate].
int64_t expert_bytes(const deepseek_v3::Config& c);
// The router gate [n_routed_experts, hidden] in bf16 and its fp32 e_score_correction_bias.
int64_t router_bytes(const deepseek_v3::Config& c);
// The dense MLP of the first first_k_dense_replace layers: gate, up [intermediate, hidden], down.
int64_t dense_mlp_bytes(const deepseek_v3::Config& c);
// The lm_head [vocab, hidden] in bf16.
int64_t lm_head_bytes(const deepseek_v3::Config& c);
// Distinct routed experts `tokens` tokens touch when each picks top_k of `experts` uniformly, tokens independent:
// experts (1 - (1 - top_k / experts)^tokens). Exact in expectation under noaux_tc's group limit too, which changes
// which experts one token picks together but not any expert's chance top_k / experts.
double expected_touched_experts(double experts, double top_k, double tokens);
inline double expected_touched_experts(const deepseek_v3::Config& c, double tokens) {
  return expected_touched_experts(c.n_routed_experts, c.num_experts_per_tok, tokens);
}
// The latent KV a step moves: each sequence's context rows read, its new rows written (576 values a row for R1),
// at kv_element_bytes a value (2: bf16, 1: fp8 e4m3).
double latent_kv_bytes(const deepseek_v3::Config& c, const LayerStep& step, int kv_element_bytes);

// ---- FLOPs ----
// q_a, q_b, kv_a and o for every token (kv_b belongs to the attention core's form).
double attention_projection_flops(const deepseek_v3::Config& c, double tokens);
// Absorbed: W_UK and W_UV per query token per head, then per (query, key) pair and head a 576-wide score and a
// 512-wide output.
double mla_absorbed_flops(const deepseek_v3::Config& c, const LayerStep& step);
// Expanded: kv_b for every key the step sees once (cached and new), then per pair and head a 192-wide score and a
// 128-wide output.
double mla_expanded_flops(const deepseek_v3::Config& c, const LayerStep& step);
double attention_core_flops(const deepseek_v3::Config& c, const LayerStep& step);  // the cheaper of the two
// Router logits, top_k routed experts and the shared ones (SwiGLU: gate, up and down) for every token.
double moe_flops(const deepseek_v3::Config& c, double tokens);
double dense_mlp_flops(const deepseek_v3::Config& c, double tokens);
double lm_head_flops(const deepseek_v3::Config& c, double rows);

// A layer's floors by term. GEMM FLOPs (FP8 projections, experts) and attention-core FLOPs (bf16 in practice) are
// kept apart, so that each can be set against its own measured rate.
struct LayerFloor {
  double attention_weight_bytes = 0, router_bytes = 0, shared_expert_bytes = 0, routed_expert_bytes = 0,
         dense_mlp_bytes = 0, latent_kv_bytes = 0;
  double touched_experts = 0;
  double gemm_flops = 0, attention_core_flops = 0;

  double bytes() const {
    return attention_weight_bytes + router_bytes + shared_expert_bytes + routed_expert_bytes + dense_mlp_bytes +
           latent_kv_bytes;
  }
  double flops() const { return gemm_flops + attention_core_flops; }
};
// An MoE layer whose step touched `touched_experts` routed experts (counted from the router, or
// expected_touched_experts).
LayerFloor moe_layer_floor(const deepseek_v3::Config& c, const LayerStep& step, double touched_experts,
                           int kv_element_bytes);
LayerFloor dense_layer_floor(const deepseek_v3::Config& c, const LayerStep& step, int kv_element_bytes);

// The same floors split the way the CUDA runner's kernel timer splits a layer (deepseek_layer_bench --breakdown),
// each class with its bytes and its FLOPs at the rate its kernels run: FP8 for the block-scaled projections and the
// experts, bf16 for the router and the attention core. The attention core takes the form the step ran: expanded
// (the latents through kv_b, then the prefill attention) or absorbed (both in the decode attention). Weight bytes
// go to the class that reads them, the latent KV's context rows to the attention (or the expansion), the step's own
// rows to the cache write. Summed over the classes: the layer floor's bytes and FLOPs (the form's).
struct ClassFloor {
  double bytes = 0, fp8_flops = 0, bf16_flops = 0;
  double seconds(double copy_bytes_per_s, double fp8_flops_per_s, double bf16_flops_per_s) const;
};
struct LayerClassFloors {
  ClassFloor qkv_projection;     // q_a, q_b, kv_a
  ClassFloor kv_write;           // the step's latent rows
  ClassFloor latent_expansion;   // expanded form: kv_b over every key the step sees
  ClassFloor attention_prefill;  // expanded form: 192-wide scores, 128-wide values per pair and head
  ClassFloor attention_decode;   // absorbed form: absorption, the latent-space attention, un-absorption
  ClassFloor output_projection;  // o
  ClassFloor router;             // the gate's logits
  ClassFloor experts_gate_up;    // the routed experts' gate and up projections
  ClassFloor experts_down;       // and their down projection
  ClassFloor mlp;                // the dense MLP (dense layers) or the shared experts (MoE layers)
};
LayerClassFloors layer_class_floors(const deepseek_v3::Config& c, const LayerStep& step, bool moe,
                                    double touched_experts, int kv_element_bytes, bool expanded);

// Seconds of a floor at measured rates: bytes over the copy bandwidth; GEMM FLOPs over the FP8 matrix rate plus
// attention-core FLOPs over the bf16 rate.
double byte_floor_seconds(const LayerFloor& f, double copy_bytes_per_s);
double flop_floor_seconds(const LayerFloor& f, double fp8_flops_per_s, double bf16_flops_per_s);

}  // namespace moeserve::deepseek_bench
