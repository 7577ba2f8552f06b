// The DeepSeek-V3 configuration (DeepSeek-V3, DeepSeek-R1: Hugging Face config.json with model_type deepseek_v3),
// the one home of the family's constants. Every field of the published config is read and checked against the
// others; what moeserve cannot run (another router, another activation, tied embeddings) is refused by name.
//
// Sources: transformers' configuration_deepseek_v3.py and modeling_deepseek_v3.py (the oracle), deepseek-ai/
// DeepSeek-V3 inference/model.py (ModelArgs, MLA, Gate, MTP), and the published DeepSeek-R1 config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace moeserve::deepseek_v3 {

// rope_scaling: null (plain RoPE) or YaRN with DeepSeek's mscale keys.
struct Rope {
  bool yarn = false;
  RopeConfig yarn_params;  // theta, factor, beta_fast/slow, original_max_position, truncate (default true)
  bool has_attention_factor = false;  // rope_scaling.attention_factor given explicitly
  double mscale = 0.0;          // 0: absent
  double mscale_all_dim = 0.0;  // 0: absent
};

struct Config {
  int num_layers = 0;  // num_hidden_layers: the main model; the MTP layers follow as layers num_layers, ...
  int hidden_size = 0;
  int intermediate_size = 0;      // the dense MLP of layers [0, first_k_dense_replace)
  int moe_intermediate_size = 0;  // each routed expert, and each shared expert
  int num_heads = 0;
  int q_lora_rank = 0;  // 0: q_lora_rank null, a plain q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 0;     // routed experts fall into n_group groups of n_routed_experts / n_group
  int topk_group = 0;  // groups kept per token (by the sum of each group's two best biased scores)
  int first_k_dense_replace = 0;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 2.5;
  int vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  Rope rope;
  int num_nextn_predict_layers = 0;  // MTP modules (DeepSeek-V3/R1: 1)
  // quantization_config: FP8 e4m3 weights with [block_rows, block_cols] scales; false for a bf16 checkpoint.
  bool fp8 = false;
  int fp8_block_rows = 128;
  int fp8_block_cols = 128;
  int32_t bos_token_id = 0;
  std::vector<int32_t> eos_token_ids;  // generation_config.json's eos_token_id, else config.json's
  nlohmann::json source;               // config.json as read

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int kv_a_rows() const { return kv_lora_rank + qk_rope_head_dim; }  // kv_a_proj_with_mqa: latent, then k_pe
  int kv_b_rows_per_head() const { return qk_nope_head_dim + v_head_dim; }
  int experts_per_group() const { return n_routed_experts / n_group; }
  bool is_moe_layer(int layer) const { return layer >= first_k_dense_replace; }
  // One token's latent KV per layer (the absorbed form's cache): the normed latent, then the rotated k_pe.
  int latent_width() const { return kv_lora_rank + qk_rope_head_dim; }

  // Softmax scale: qk_head_dim^-0.5, times m^2 with m = 0.1 * mscale_all_dim * ln(factor) + 1 under YaRN with
  // mscale_all_dim set (transformers' DeepseekV3Attention; vLLM and SGLang do the same).
  float softmax_scale() const;
  // Multiplier on cos and sin (transformers' _compute_yarn_parameters attention_factor): 1 for plain RoPE;
  // get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set (1 for R1).
  float rope_attention_factor() const;
  // Inverse frequencies of the qk_rope_head_dim / 2 rotary pairs.
  std::vector<float> rope_inverse_frequencies() const;

  // The model as the engine sees it (ModelConfig): layers, widths, context, vocabulary and stop tokens; every
  // layer full attention, so one KV group.
  ModelConfig engine_view() const;

  void validate(const std::string& where) const;
};

// config.json (and generation_config.json when present) of a DeepSeek-V3 checkpoint directory.
Config load_config(const std::string& dir);
Config parse_config(const nlohmann::json& json, const std::string& where);
// The config.json a DeepSeek-R1 checkpoint carries, for these values (make-tiny).
nlohmann::json to_config_json(const Config& config);

}  // namespace moeserve::deepseek_v3
