// An EAGLE-3 draft head's configuration, read from its config.json as exported for gpt-oss (ModelOpt's
// LlamaForCausalLMEagle3 template in modelopt/torch/export/plugins/hf_spec_configs.py; the forward as vLLM's
// model_executor/models/llama_eagle3.py runs it): one Llama decoder layer over the fused target features, its own
// RoPE, a draft vocabulary mapped to the target's.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::speculative {

// Llama RoPE (rotate-half pairs (i, i + head_dim / 2)), optionally with Llama 3.1's frequency-dependent scaling.
struct LlamaRope {
  enum class Scaling { none, llama3 };
  double theta = 10000.0;
  Scaling scaling = Scaling::none;
  // llama3 (transformers _compute_llama3_parameters): wavelengths above original / low_freq_factor are divided by
  // factor, below original / high_freq_factor kept, smoothly interpolated between.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct Eagle3Config {
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  double rms_norm_eps = 1e-5;
  LlamaRope rope;
  int64_t max_position_embeddings = 0;
  int vocab_size = 0;        // the target's vocabulary
  int draft_vocab_size = 0;  // rows of lm_head; smaller than vocab_size needs a d2t table
  int target_hidden_size = 0;  // width of each captured target feature (hidden_size unless given)
  // Target layers (0-based, output-of-layer convention) whose residual streams are fused, ascending.
  std::vector<int> aux_layer_ids;
  bool norm_before_fc = false;        // RMSNorm (input_norm.weight) over the concatenated features before fc
  bool norm_before_residual = false;  // residual = hidden_norm(g) instead of g (the "speculators" format)
  nlohmann::json source;              // the file as read

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int heads_per_kv() const { return num_heads / num_kv_heads; }
  int64_t feature_width() const { return static_cast<int64_t>(aux_layer_ids.size()) * target_hidden_size; }
};

// ModelOpt's default_eagle_aux_layer_ids: sorted({1, N/2 - 1, N - 4}) of the target's N layers.
std::vector<int> default_aux_layer_ids(int target_num_layers);

// Parses a draft head's config.json; target_num_layers bounds (and, when the config names none, defines) the
// aux layer ids. Fails naming `where` and the field.
Eagle3Config parse_eagle3_config(const nlohmann::json& json, const std::string& where, int target_num_layers);
// DIR/config.json.
Eagle3Config load_eagle3_config(const std::string& dir, int target_num_layers);
// The exported layout of a config (make-tiny writes it): eagle_config nested, norm_before_fc inside it.
nlohmann::json to_eagle3_config_json(const Eagle3Config& config);

// The head_dim / 2 inverse frequencies, in fp32 as transformers computes them.
std::vector<float> llama_rope_inverse_frequencies(const LlamaRope& rope, int head_dim);

}  // namespace moeserve::speculative
