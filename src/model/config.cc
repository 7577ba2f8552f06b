#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <numbers>

#include "util/error.h"
#include "util/files.h"
#include "util/json_fields.h"

namespace moeserve {
namespace {

using nlohmann::json;

std::vector<AttentionKind> alternating_layer_types(int num_layers) {
  // Sliding on even layers (0, 2, ...), full on odd ones: gpt_oss/torch and HF's default layer_types.
  std::vector<AttentionKind> types;
  for (int i = 0; i < num_layers; ++i) types.push_back(i % 2 == 0 ? AttentionKind::sliding : AttentionKind::full);
  return types;
}

void parse_rope_parameters(const json& rope, RopeConfig& out, const std::string& where) {
  MOESERVE_CHECK(rope.is_object(), "{}: not a JSON object", where);
  std::string type = optional_field<std::string>(
      rope, "rope_type", optional_field<std::string>(rope, "type", "yarn", where), where);
  MOESERVE_CHECK(type == "yarn", "{}: rope_type \"{}\" is not supported (GPT-OSS uses yarn)", where, type);
  out.factor = optional_field<double>(rope, "factor", out.factor, where);
  out.beta_fast = optional_field<double>(rope, "beta_fast", out.beta_fast, where);
  out.beta_slow = optional_field<double>(rope, "beta_slow", out.beta_slow, where);
  out.original_max_position =
      optional_field<int64_t>(rope, "original_max_position_embeddings", out.original_max_position, where);
  out.truncate = optional_field<bool>(rope, "truncate", true, where);
  out.attention_factor = optional_field<double>(rope, "attention_factor", 0.0, where);
  out.theta = optional_field<double>(rope, "rope_theta", out.theta, where);
}

// num_hidden_layers sizes layer_types before validate() runs: bounded as it is read.
int layer_count(const json& j, const std::string& where) {
  return required_field<int>(j, "num_hidden_layers", where, 1, config_limits::kLayers);
}

// The context YaRN extends to, original_max_position_embeddings * factor, bounded before it becomes an integer.
int64_t scaled_context(const RopeConfig& rope, const std::string& where) {
  const double context = static_cast<double>(rope.original_max_position) * rope.factor;
  MOESERVE_CHECK(context >= 1 && context <= static_cast<double>(config_limits::kPositions),
                 "{}: original_max_position_embeddings {} * rope factor {} is out of range (1..{})", where,
                 rope.original_max_position, rope.factor, config_limits::kPositions);
  return static_cast<int64_t>(context);
}

}  // namespace

float ModelConfig::attention_scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

double ModelConfig::rope_concentration() const {
  if (rope.attention_factor > 0) return rope.attention_factor;
  return rope.factor > 1.0 ? 0.1 * std::log(rope.factor) + 1.0 : 1.0;
}

void ModelConfig::validate(const std::string& where) const {
  namespace limits = config_limits;
  in_range(num_layers, 1, limits::kLayers, where, "num_hidden_layers");
  in_range(hidden_size, 1, limits::kHiddenSize, where, "hidden_size");
  in_range(num_heads, 1, limits::kHeads, where, "num_attention_heads");
  in_range(num_kv_heads, 1, limits::kHeads, where, "num_key_value_heads");
  in_range(head_dim, 1, limits::kHeadDim, where, "head_dim");
  in_range(kv_tensors, 1, 2, where, "kv_tensors (KV tensors a token keeps per layer)");
  in_range(num_experts, 1, limits::kExperts, where,
           layout == CheckpointLayout::huggingface ? "num_local_experts" : "num_experts");
  in_range(intermediate_size, 1, limits::kIntermediateSize, where, "intermediate_size");
  in_range(vocab_size, 1, limits::kVocabSize, where, "vocab_size");
  in_range(sliding_window, 1, static_cast<int>(limits::kPositions), where, "sliding_window");
  in_range<int64_t>(max_position_embeddings, 1, limits::kPositions, where, "max_position_embeddings");
  in_range<int64_t>(rope.original_max_position, 1, limits::kPositions, where, "original_max_position_embeddings");
  in_range(rope.theta, 1.0, limits::kRopeValue, where, "rope_theta");
  in_range(rope.factor, 1.0, limits::kRopeValue, where, "rope factor");
  in_range(rope.beta_fast, 0.0, limits::kRopeValue, where, "beta_fast");
  in_range(rope.beta_slow, 0.0, limits::kRopeValue, where, "beta_slow");
  in_range(rope.attention_factor, 0.0, limits::kRopeValue, where, "attention_factor");
  MOESERVE_CHECK(hidden_size % 32 == 0, "{}: hidden_size {} must be a positive multiple of 32 (MXFP4 blocks)", where,
                 hidden_size);
  MOESERVE_CHECK(intermediate_size % 32 == 0,
                 "{}: intermediate_size {} must be a positive multiple of 32 (MXFP4 blocks)", where,
                 intermediate_size);
  MOESERVE_CHECK(num_heads % num_kv_heads == 0,
                 "{}: num_attention_heads {} must be a positive multiple of num_key_value_heads {}", where,
                 num_heads, num_kv_heads);
  MOESERVE_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be positive and even", where, head_dim);
  MOESERVE_CHECK(experts_per_token > 0 && experts_per_token <= num_experts,
                 "{}: experts_per_token {} must be in 1..num_experts {}", where, experts_per_token, num_experts);
  MOESERVE_CHECK(static_cast<int>(layer_types.size()) == num_layers,
                 "{}: layer_types has {} entries for {} layers", where, layer_types.size(), num_layers);
  MOESERVE_CHECK(rope.theta > 1 && rope.beta_fast > rope.beta_slow && rope.beta_slow > 0,
                 "{}: invalid YaRN parameters", where);
  MOESERVE_CHECK(rms_norm_eps > 0 && rms_norm_eps < 1, "{}: rms_norm_eps = {} is out of range (0..1)", where,
                 rms_norm_eps);
  MOESERVE_CHECK(swiglu_limit > 0, "{}: swiglu_limit must be positive", where);
  MOESERVE_CHECK(swiglu_alpha > 0, "{}: swiglu_alpha must be positive", where);
}

std::vector<int32_t> parse_eos_token_ids(const json& j, const std::string& where) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return {};
  const json& eos = j["eos_token_id"];
  std::vector<int32_t> ids = eos.is_array() ? json_value_as<std::vector<int32_t>>(eos, where, "eos_token_id")
                                            : std::vector<int32_t>{json_value_as<int32_t>(eos, where, "eos_token_id")};
  for (int32_t id : ids) MOESERVE_CHECK(id >= 0, "{}: eos_token_id {} is negative", where, id);
  return ids;
}

ModelConfig parse_hf_config(const json& j, const std::string& where) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  std::string model_type = required_field<std::string>(j, "model_type", where);
  MOESERVE_CHECK(model_type == "gpt_oss", "{}: unknown model_type \"{}\" (moeserve serves gpt_oss)", where,
                 model_type);
  ModelConfig c;
  c.layout = CheckpointLayout::huggingface;
  c.num_layers = layer_count(j, where);
  c.hidden_size = required_field<int>(j, "hidden_size", where);
  c.num_heads = required_field<int>(j, "num_attention_heads", where);
  c.num_kv_heads = required_field<int>(j, "num_key_value_heads", where);
  c.head_dim = optional_field<int>(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0, where);
  c.num_experts = required_field<int>(j, "num_local_experts", where);
  c.experts_per_token =
      optional_field<int>(j, "num_experts_per_tok", optional_field<int>(j, "experts_per_token", 0, where), where);
  c.intermediate_size = required_field<int>(j, "intermediate_size", where);
  c.vocab_size = required_field<int>(j, "vocab_size", where);
  c.sliding_window = required_field<int>(j, "sliding_window", where);
  c.rms_norm_eps = optional_field<double>(j, "rms_norm_eps", 1e-5, where);
  c.swiglu_limit = optional_field<float>(j, "swiglu_limit", 7.0f, where);
  c.swiglu_alpha = optional_field<float>(j, "swiglu_alpha", 1.702f, where);
  c.rope.theta = optional_field<double>(j, "rope_theta", c.rope.theta, where);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    parse_rope_parameters(j["rope_scaling"], c.rope, where + " rope_scaling");
  else if (j.contains("rope_parameters") && !j["rope_parameters"].is_null())
    parse_rope_parameters(j["rope_parameters"], c.rope, where + " rope_parameters");
  else
    fail("{}: neither rope_scaling nor rope_parameters is given", where);
  c.max_position_embeddings = j.contains("max_position_embeddings") && !j["max_position_embeddings"].is_null()
                                  ? required_field<int64_t>(j, "max_position_embeddings", where)
                                  : scaled_context(c.rope, where);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    MOESERVE_CHECK(j["layer_types"].is_array(), "{}: layer_types is not an array", where);
    for (const std::string& s : json_value_as<std::vector<std::string>>(j["layer_types"], where, "layer_types")) {
      if (s == "sliding_attention")
        c.layer_types.push_back(AttentionKind::sliding);
      else if (s == "full_attention")
        c.layer_types.push_back(AttentionKind::full);
      else
        fail("{}: unknown layer type {}", where, s);
    }
  } else {
    c.layer_types = alternating_layer_types(c.num_layers);
  }
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    std::string method = optional_field<std::string>(j["quantization_config"], "quant_method", "",
                                                     where + " quantization_config");
    MOESERVE_CHECK(method == "mxfp4", "{}: quantization method \"{}\" is not supported (mxfp4 or none)", where,
                   method);
  }
  c.eos_token_ids = parse_eos_token_ids(j, where);
  c.source = j;
  c.validate(where);
  return c;
}

ModelConfig parse_original_config(const json& j, const std::string& where) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  ModelConfig c;
  c.layout = CheckpointLayout::original;
  c.num_layers = layer_count(j, where);
  c.hidden_size = required_field<int>(j, "hidden_size", where);
  c.num_heads = required_field<int>(j, "num_attention_heads", where);
  c.num_kv_heads = required_field<int>(j, "num_key_value_heads", where);
  c.head_dim = required_field<int>(j, "head_dim", where);
  c.num_experts = required_field<int>(j, "num_experts", where);
  c.experts_per_token = required_field<int>(j, "experts_per_token", where);
  c.intermediate_size = required_field<int>(j, "intermediate_size", where);
  c.vocab_size = required_field<int>(j, "vocab_size", where);
  c.sliding_window = required_field<int>(j, "sliding_window", where);
  c.swiglu_limit = required_field<float>(j, "swiglu_limit", where);
  c.rope.theta = required_field<double>(j, "rope_theta", where);
  c.rope.factor = required_field<double>(j, "rope_scaling_factor", where);
  c.rope.beta_slow = required_field<double>(j, "rope_ntk_alpha", where);
  c.rope.beta_fast = required_field<double>(j, "rope_ntk_beta", where);
  c.rope.original_max_position = required_field<int64_t>(j, "initial_context_length", where);
  c.rope.truncate = false;  // gpt_oss/torch/model.py never rounds the correction range
  c.max_position_embeddings = scaled_context(c.rope, where);
  c.layer_types = alternating_layer_types(c.num_layers);
  c.source = j;
  c.validate(where);
  return c;
}

json read_config_json(const std::string& dir, std::string& path) {
  namespace fs = std::filesystem;
  MOESERVE_CHECK(fs::is_directory(dir), "model directory {} does not exist", dir);
  path = (fs::path(dir) / "config.json").string();
  MOESERVE_CHECK(file_exists(path), "{} has no config.json", dir);
  json j = read_json_file(path);
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", path);
  return j;
}

ModelFamily model_family_of(const std::string& dir) {
  std::string path;
  if (!file_exists((std::filesystem::path(dir) / "config.json").string())) return ModelFamily::gpt_oss;
  const json j = read_config_json(dir, path);
  return optional_field<std::string>(j, "model_type", "", path) == "deepseek_v3" ? ModelFamily::deepseek_v3
                                                                                 : ModelFamily::gpt_oss;
}

void read_generation_eos(const std::string& dir, std::vector<int32_t>& ids) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (!file_exists(path)) return;
  const json g = read_json_file(path);
  MOESERVE_CHECK(g.is_object(), "{}: not a JSON object", path);
  // Absent or null: the ids of config.json stand.
  if (g.contains("eos_token_id") && !g["eos_token_id"].is_null()) ids = parse_eos_token_ids(g, path);
}

ModelConfig load_model_config(const std::string& dir) {
  std::string path;
  const json j = read_config_json(dir, path);
  ModelConfig config;
  if (j.contains("model_type")) {
    config = parse_hf_config(j, path);
  } else if (j.contains("num_experts") && j.contains("experts_per_token")) {
    config = parse_original_config(j, path);
  } else {
    fail("{}: neither a Hugging Face config (model_type) nor an OpenAI original config (num_experts)", path);
  }
  read_generation_eos(dir, config.eos_token_ids);
  return config;
}

namespace {
// o200k_harmony's special ids exist only in the full vocabulary; small test vocabularies leave them unset.
json special_token_or_null(const ModelConfig& c, int32_t id) { return id < c.vocab_size ? json(id) : json(nullptr); }

json layer_types_json(const ModelConfig& c) {
  json types = json::array();
  for (auto t : c.layer_types) types.push_back(t == AttentionKind::sliding ? "sliding_attention" : "full_attention");
  return types;
}
}  // namespace

json to_hf_config_json(const ModelConfig& c) {
  // Key for key the shape of openai/gpt-oss-20b's config.json.
  return json{{"architectures", {"GptOssForCausalLM"}},
              {"attention_bias", true},
              {"attention_dropout", 0.0},
              {"eos_token_id", special_token_or_null(c, 200002)},
              {"experts_per_token", c.experts_per_token},
              {"head_dim", c.head_dim},
              {"hidden_act", "silu"},
              {"hidden_size", c.hidden_size},
              {"initial_context_length", c.rope.original_max_position},
              {"initializer_range", 0.02},
              {"intermediate_size", c.intermediate_size},
              {"layer_types", layer_types_json(c)},
              {"max_position_embeddings", c.max_position_embeddings},
              {"model_type", "gpt_oss"},
              {"num_attention_heads", c.num_heads},
              {"num_experts_per_tok", c.experts_per_token},
              {"num_hidden_layers", c.num_layers},
              {"num_key_value_heads", c.num_kv_heads},
              {"num_local_experts", c.num_experts},
              {"output_router_logits", false},
              {"pad_token_id", special_token_or_null(c, 199999)},
              {"quantization_config",
               {{"modules_to_not_convert",
                 {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
                {"quant_method", "mxfp4"}}},
              {"rms_norm_eps", c.rms_norm_eps},
              {"rope_scaling",
               {{"beta_fast", c.rope.beta_fast},
                {"beta_slow", c.rope.beta_slow},
                {"factor", c.rope.factor},
                {"original_max_position_embeddings", c.rope.original_max_position},
                {"rope_type", "yarn"},
                {"truncate", c.rope.truncate}}},
              {"rope_theta", c.rope.theta},
              {"router_aux_loss_coef", 0.9},
              {"sliding_window", c.sliding_window},
              {"swiglu_limit", c.swiglu_limit},
              {"tie_word_embeddings", false},
              {"use_cache", true},
              {"vocab_size", c.vocab_size}};
}

json to_original_config_json(const ModelConfig& c) {
  return json{{"num_hidden_layers", c.num_layers},
              {"num_experts", c.num_experts},
              {"experts_per_token", c.experts_per_token},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"swiglu_limit", c.swiglu_limit},
              {"head_dim", c.head_dim},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.num_kv_heads},
              {"sliding_window", c.sliding_window},
              {"initial_context_length", c.rope.original_max_position},
              {"rope_theta", c.rope.theta},
              {"rope_scaling_factor", c.rope.factor},
              {"rope_ntk_alpha", c.rope.beta_slow},
              {"rope_ntk_beta", c.rope.beta_fast}};
}

std::vector<float> yarn_inverse_frequencies(const RopeConfig& rope, int dim) {
  // transformers _compute_yarn_parameters / gpt_oss RotaryEmbedding._compute_concentration_and_inv_freq.
  const int half = dim / 2;
  const double base = rope.theta;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(static_cast<double>(rope.original_max_position) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast);
  double high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a division by zero, as transformers does
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    // transformers computes base ** (2i/dim) in float32; so do we, for the same rounding.
    float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    float extrapolation = 1.0f / pos_freq;
    float interpolation = 1.0f / (static_cast<float>(rope.factor) * pos_freq);
    float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    float extrapolation_weight = 1.0f - ramp;
    inv_freq[i] = interpolation * (1.0f - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  return inv_freq;
}

std::vector<float> rope_inverse_frequencies(const ModelConfig& c) { return yarn_inverse_frequencies(c.rope, c.head_dim); }

}  // namespace moeserve
