// Views of a DeepSeek-V3 checkpoint's tensors by role. Nothing large is copied: bf16/f32 matrices and FP8 weights
// point into the mapped safetensors files; only vectors (norm scales, router biases) and FP8 block scales are
// held as floats. Shapes are PyTorch's [out, in].
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/fp8_blocks.h"
#include "model/weights.h"

namespace moeserve::deepseek_v3 {

// A projection's weight [rows, cols] = [out, in]: FP8 e4m3 with block scales (what DeepSeek-V3/R1 ship for every
// linear of attention and the MLPs), or bf16/f32.
struct Linear {
  bool is_fp8 = false;
  Matrix dense;        // !is_fp8
  Fp8BlockMatrix fp8;  // is_fp8

  int64_t rows() const { return is_fp8 ? fp8.rows : dense.rows; }
  int64_t cols() const { return is_fp8 ? fp8.cols : dense.cols; }
  float at(int64_t r, int64_t c) const { return is_fp8 ? fp8.at(r, c) : dense.at(r, c); }
};

// SwiGLU MLP: down(silu(gate x) * up x), no bias, no clamp. The dense layers' MLP, each routed expert and the
// shared expert.
struct Mlp {
  Linear gate, up;  // [intermediate, hidden]
  Linear down;      // [hidden, intermediate]
};

// Multi-head latent attention (DeepSeek-V2/V3 MLA).
struct Attention {
  // q_lora_rank set: q = q_b(q_a_norm(q_a x)); else q = q x. Rows are head-major, each head nope then rope values.
  Linear q;    // [heads * qk_head_dim, hidden] (q_lora_rank null)
  Linear q_a;  // [q_lora_rank, hidden]
  std::vector<float> q_a_norm;  // [q_lora_rank]
  Linear q_b;  // [heads * qk_head_dim, q_lora_rank]
  Linear kv_a;  // kv_a_proj_with_mqa [kv_lora_rank + qk_rope_head_dim, hidden]: the latent rows, then k_pe's
  std::vector<float> kv_a_norm;  // [kv_lora_rank], the latent only
  Linear kv_b;  // [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]: per head W_UK rows, then W_UV rows
  Linear o;     // [hidden, heads * v_head_dim]
};

struct Layer {
  std::vector<float> input_norm;           // input_layernorm [hidden]
  std::vector<float> post_attention_norm;  // post_attention_layernorm [hidden]
  Attention attention;
  bool moe = false;
  Mlp dense;                      // !moe: [intermediate_size]
  Matrix router;                  // moe: mlp.gate.weight [n_routed_experts, hidden]
  std::vector<float> router_bias;  // moe: mlp.gate.e_score_correction_bias [n_routed_experts], for choosing only
  std::vector<Mlp> experts;       // moe: [moe_intermediate_size] each
  std::optional<Mlp> shared;      // moe with n_shared_experts > 0: [moe_intermediate_size * n_shared_experts]
};

// The multi-token prediction module (model.layers.<num_hidden_layers>.*): enorm(embedding of the next token) and
// hnorm(hidden state), concatenated in that order, eh_proj, one decoder layer, shared_head.norm and the lm_head.
struct Mtp {
  std::vector<float> enorm, hnorm;  // [hidden]
  Linear eh_proj;                   // [hidden, 2 * hidden]
  Layer layer;
  std::vector<float> head_norm;  // shared_head.norm [hidden]
  // DeepSeek-R1 stores copies of the embedding and lm_head in the module (embed_tokens, shared_head.head); a
  // checkpoint without them shares the main model's, as SGLang loads it.
  Matrix embedding;
  Matrix head;
};

struct Weights {
  Matrix embedding;  // [vocab, hidden]
  Matrix lm_head;    // [vocab, hidden]
  std::vector<float> final_norm;
  std::vector<Layer> layers;
  std::optional<Mtp> mtp;
};

}  // namespace moeserve::deepseek_v3
