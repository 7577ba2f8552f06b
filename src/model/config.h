// The GPT-OSS model configuration: the one home of every model constant (window, SwiGLU limit and alpha,
// YaRN parameters). Read from Hugging Face config.json (model_type gpt_oss) or OpenAI's original/config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve {

enum class CheckpointLayout { huggingface, original };
// The model families moeserve runs: GPT-OSS (this file's ModelConfig) and DeepSeek-V3 / R1
// (model/deepseek_v3/config.h, which presents itself to the engine as a ModelConfig).
enum class ModelFamily { gpt_oss, deepseek_v3 };

// Bounds on a config's sizes, checked as config.json is read and before anything is sized by them: far above
// every GPT-OSS (and DeepSeek) shape, far below what would exhaust memory or overflow the int arithmetic of
// tensor shapes (heads * head_dim, 2 * intermediate_size).
namespace config_limits {
inline constexpr int kLayers = 1024;
inline constexpr int kHiddenSize = 65536;
inline constexpr int kHeads = 1024;
inline constexpr int kHeadDim = 1024;
inline constexpr int kExperts = 4096;
inline constexpr int kIntermediateSize = 262144;
inline constexpr int kVocabSize = 1 << 24;
inline constexpr int64_t kPositions = int64_t{1} << 24;
inline constexpr double kRopeValue = 1e12;  // theta, factor, betas: finite and positive, at most this
}  // namespace config_limits
enum class AttentionKind { sliding, full };

// YaRN as gpt_oss/torch/model.py and transformers' _compute_yarn_parameters compute it.
struct RopeConfig {
  double theta = 150000.0;
  double factor = 32.0;                 // context extension
  double beta_fast = 32.0;              // OpenAI's rope_ntk_beta
  double beta_slow = 1.0;               // OpenAI's rope_ntk_alpha
  int64_t original_max_position = 4096;  // initial_context_length
  bool truncate = false;                // floor/ceil the correction range (HF's default is true; GPT-OSS sets false)
  double attention_factor = 0.0;        // "concentration"; 0 means 0.1 * ln(factor) + 1
};

struct ModelConfig {
  int num_layers = 0;
  int hidden_size = 0;
  int num_heads = 0;      // query heads
  int num_kv_heads = 0;   // GQA: num_heads / num_kv_heads query heads share a KV head
  int head_dim = 0;
  int num_experts = 0;
  int experts_per_token = 0;
  int intermediate_size = 0;  // per expert; mlp1 has 2 * intermediate_size interleaved gate/up rows
  int vocab_size = 0;
  int sliding_window = 0;     // a query at position q sees keys q - window + 1 .. q on sliding layers
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  float swiglu_limit = 7.0f;   // gate clamped above, linear clamped to [-limit, limit]
  float swiglu_alpha = 1.702f;  // gate * sigmoid(alpha * gate); not in config.json, fixed by the reference code
  RopeConfig rope;
  std::vector<AttentionKind> layer_types;
  // What a token keeps per layer in the KV cache: kv_tensors x kv_dim() values. 2 for GPT-OSS (K and V heads); 1
  // for DeepSeek's MLA, whose cache is one latent (512 + 64 rope values) that serves as both.
  int kv_tensors = 2;
  std::vector<int32_t> eos_token_ids;  // generation_config.json's eos_token_id
  CheckpointLayout layout = CheckpointLayout::huggingface;
  ModelFamily family = ModelFamily::gpt_oss;
  nlohmann::json source;  // the config file as read, recorded in benchmark results

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int kv_values_per_token() const { return kv_tensors * kv_dim(); }  // per layer
  int heads_per_kv() const { return num_heads / num_kv_heads; }
  float attention_scale() const;   // 1 / sqrt(head_dim)
  double rope_concentration() const;

  // Checks every field against its bound (config_limits) and the fields against each other; fails naming
  // `where` and the field.
  void validate(const std::string& where) const;
};

// DIR/config.json as a JSON object (path: where it was read); fails naming what is missing or malformed.
nlohmann::json read_config_json(const std::string& dir, std::string& path);

// The family of a checkpoint directory, from its config.json: model_type deepseek_v3, else GPT-OSS (model_type
// gpt_oss or OpenAI's original keys; load_model_config checks which). A directory without config.json is GPT-OSS's
// too, so that its loaders report what is missing exactly as before a second family existed.
ModelFamily model_family_of(const std::string& dir);

// generation_config.json's eos_token_id (an id or a list), when the file exists and names one; ids untouched
// otherwise.
void read_generation_eos(const std::string& dir, std::vector<int32_t>& ids);

// Reads DIR/config.json (and DIR/generation_config.json when present). An OpenAI original-layout directory is
// recognised by its keys (num_experts, experts_per_token, no model_type).
ModelConfig load_model_config(const std::string& dir);
// eos_token_id as config.json and generation_config.json give it: absent or null (none), one id or a list of ids.
std::vector<int32_t> parse_eos_token_ids(const nlohmann::json& json, const std::string& where);

ModelConfig parse_hf_config(const nlohmann::json& json, const std::string& where);
ModelConfig parse_original_config(const nlohmann::json& json, const std::string& where);
nlohmann::json to_hf_config_json(const ModelConfig& config);
nlohmann::json to_original_config_json(const ModelConfig& config);

// YaRN inverse frequencies for the dim / 2 rotary pairs (transformers' _compute_yarn_parameters).
std::vector<float> yarn_inverse_frequencies(const RopeConfig& rope, int dim);
// GPT-OSS: yarn_inverse_frequencies over head_dim.
std::vector<float> rope_inverse_frequencies(const ModelConfig& config);

}  // namespace moeserve
