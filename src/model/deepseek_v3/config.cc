#include "model/deepseek_v3/config.h"

#include <cmath>

#include "util/error.h"
#include "util/json_fields.h"

namespace moeserve::deepseek_v3 {
namespace {

using nlohmann::json;

// transformers' yarn_get_mscale / get_mscale (DeepSeek's inference/model.py yarn_get_mscale).
double get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// rope_scaling as DeepSeek-R1 writes it ({"type": "yarn", ...}, ints for factor and betas) or as transformers 5
// writes rope_parameters (rope_type, rope_theta inside).
Rope parse_rope(const json& j, const std::string& where) {
  Rope rope;
  rope.yarn_params.theta = optional_field<double>(j, "rope_theta", 10000.0, where);
  const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling" : "rope_parameters";
  if (!j.contains(key) || j[key].is_null()) return rope;
  const json& r = j[key];
  const std::string at = where + " " + key;
  MOESERVE_CHECK(r.is_object(), "{}: not a JSON object", at);
  const std::string type =
      optional_field<std::string>(r, "rope_type", optional_field<std::string>(r, "type", "default", at), at);
  if (type == "default") return rope;
  MOESERVE_CHECK(type == "yarn", "{}: rope type \"{}\" is not supported (DeepSeek-V3 uses yarn, or none)", at, type);
  rope.yarn = true;
  RopeConfig& p = rope.yarn_params;
  p.theta = optional_field<double>(r, "rope_theta", p.theta, at);
  p.factor = required_field<double>(r, "factor", at);
  p.original_max_position = required_field<int64_t>(r, "original_max_position_embeddings", at);
  p.beta_fast = optional_field<double>(r, "beta_fast", 32.0, at);
  p.beta_slow = optional_field<double>(r, "beta_slow", 1.0, at);
  p.truncate = optional_field<bool>(r, "truncate", true, at);
  rope.has_attention_factor = r.contains("attention_factor") && !r["attention_factor"].is_null();
  p.attention_factor = optional_field<double>(r, "attention_factor", 0.0, at);
  rope.mscale = optional_field<double>(r, "mscale", 0.0, at);
  rope.mscale_all_dim = optional_field<double>(r, "mscale_all_dim", 0.0, at);
  return rope;
}

// quantization_config: absent (bf16 weights) or fp8 e4m3 with 2-D weight blocks.
void parse_quantization(const json& j, Config& c, const std::string& where) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return;
  const json& q = j["quantization_config"];
  const std::string at = where + " quantization_config";
  MOESERVE_CHECK(q.is_object(), "{}: not a JSON object", at);
  const std::string method = required_field<std::string>(q, "quant_method", at);
  MOESERVE_CHECK(method == "fp8", "{}: quant_method \"{}\" is not supported (DeepSeek-V3 checkpoints use fp8)", at,
                 method);
  const std::string format = optional_field<std::string>(q, "fmt", "e4m3", at);
  MOESERVE_CHECK(format == "e4m3", "{}: fmt \"{}\" is not supported (e4m3)", at, format);
  // DeepSeek-V3.1's ue8m0 scales are powers of two stored as floats: they dequantise like any other.
  const std::string scale_format = optional_field<std::string>(q, "scale_fmt", "", at);
  MOESERVE_CHECK(scale_format.empty() || scale_format == "ue8m0", "{}: scale_fmt \"{}\" is not supported", at,
                 scale_format);
  const std::string activations = optional_field<std::string>(q, "activation_scheme", "dynamic", at);
  MOESERVE_CHECK(activations == "dynamic", "{}: activation_scheme \"{}\" is not supported (dynamic)", at, activations);
  const auto block = required_field<std::vector<int>>(q, "weight_block_size", at);
  MOESERVE_CHECK(block.size() == 2 && block[0] > 0 && block[1] > 0,
                 "{}: weight_block_size must be two positive sizes [rows, cols]", at);
  c.fp8 = true;
  c.fp8_block_rows = block[0];
  c.fp8_block_cols = block[1];
}

std::vector<int32_t> token_ids(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return {};
  if (j[key].is_array()) return required_field<std::vector<int32_t>>(j, key, where);
  return {required_field<int32_t>(j, key, where)};
}

}  // namespace

float Config::softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope.yarn && rope.mscale_all_dim != 0) {
    const double m = get_mscale(rope.yarn_params.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  return static_cast<float>(scale);
}

float Config::rope_attention_factor() const {
  if (!rope.yarn) return 1.0f;
  if (rope.has_attention_factor) return static_cast<float>(rope.yarn_params.attention_factor);
  const double factor = rope.yarn_params.factor;
  if (rope.mscale != 0 && rope.mscale_all_dim != 0)
    return static_cast<float>(get_mscale(factor, rope.mscale) / get_mscale(factor, rope.mscale_all_dim));
  return static_cast<float>(get_mscale(factor, 1.0));
}

std::vector<float> Config::rope_inverse_frequencies() const {
  if (rope.yarn) return yarn_inverse_frequencies(rope.yarn_params, qk_rope_head_dim);
  // Plain RoPE: theta^(-2j / dim), base ** (2j / dim) in float32 as transformers computes it.
  std::vector<float> inv(qk_rope_head_dim / 2);
  const float base = static_cast<float>(rope.yarn_params.theta);
  for (size_t j = 0; j < inv.size(); ++j)
    inv[j] = 1.0f / std::pow(base, static_cast<float>(2 * j) / static_cast<float>(qk_rope_head_dim));
  return inv;
}

ModelConfig Config::engine_view() const {
  ModelConfig m;
  m.family = ModelFamily::deepseek_v3;
  m.num_layers = num_layers;
  m.hidden_size = hidden_size;
  m.num_heads = num_heads;
  // The latent is one "KV head" of latent_width() values shared by every query head (MQA in the absorbed form).
  m.num_kv_heads = 1;
  m.head_dim = latent_width();
  m.kv_tensors = 1;
  m.num_experts = n_routed_experts;
  m.experts_per_token = num_experts_per_tok;
  m.intermediate_size = moe_intermediate_size;
  m.vocab_size = vocab_size;
  m.max_position_embeddings = max_position_embeddings;
  m.rms_norm_eps = rms_norm_eps;
  m.rope = rope.yarn_params;
  m.layer_types.assign(num_layers, AttentionKind::full);
  m.eos_token_ids = eos_token_ids;
  m.source = source;
  return m;
}

void Config::validate(const std::string& where) const {
  auto positive = [&](int value, const char* name) {
    MOESERVE_CHECK(value > 0, "{}: {} must be positive (got {})", where, name, value);
  };
  positive(num_layers, "num_hidden_layers");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(moe_intermediate_size, "moe_intermediate_size");
  positive(num_heads, "num_attention_heads");
  positive(kv_lora_rank, "kv_lora_rank");
  positive(qk_nope_head_dim, "qk_nope_head_dim");
  positive(v_head_dim, "v_head_dim");
  positive(vocab_size, "vocab_size");
  MOESERVE_CHECK(q_lora_rank >= 0, "{}: q_lora_rank must be positive or null (got {})", where, q_lora_rank);
  MOESERVE_CHECK(qk_rope_head_dim > 0 && qk_rope_head_dim % 2 == 0,
                 "{}: qk_rope_head_dim {} must be positive and even (pairs of rotary values)", where, qk_rope_head_dim);
  MOESERVE_CHECK(first_k_dense_replace >= 0 && first_k_dense_replace <= num_layers,
                 "{}: first_k_dense_replace {} must be in 0..num_hidden_layers {}", where, first_k_dense_replace,
                 num_layers);
  if (first_k_dense_replace < num_layers || num_nextn_predict_layers > 0) {
    positive(n_routed_experts, "n_routed_experts");
    positive(n_group, "n_group");
    MOESERVE_CHECK(n_shared_experts >= 0, "{}: n_shared_experts must not be negative", where);
    MOESERVE_CHECK(n_routed_experts % n_group == 0 && experts_per_group() >= 2,
                   "{}: n_routed_experts {} must split into n_group {} groups of at least 2 experts (a group scores "
                   "by its two best experts)",
                   where, n_routed_experts, n_group);
    MOESERVE_CHECK(topk_group >= 1 && topk_group <= n_group, "{}: topk_group {} must be in 1..n_group {}", where,
                   topk_group, n_group);
    MOESERVE_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= topk_group * experts_per_group(),
                   "{}: num_experts_per_tok {} must be in 1..{} (the experts of topk_group {} groups)", where,
                   num_experts_per_tok, topk_group * experts_per_group(), topk_group);
    MOESERVE_CHECK(routed_scaling_factor > 0, "{}: routed_scaling_factor must be positive", where);
  }
  MOESERVE_CHECK(num_nextn_predict_layers == 0 || num_nextn_predict_layers == 1,
                 "{}: num_nextn_predict_layers {} is not supported (0, or 1 as DeepSeek-V3 and R1 ship)", where,
                 num_nextn_predict_layers);
  MOESERVE_CHECK(max_position_embeddings > 0, "{}: max_position_embeddings must be positive", where);
  MOESERVE_CHECK(max_position_embeddings <= (int64_t{1} << 24),
                 "{}: max_position_embeddings {} is beyond what fp32 positions represent exactly (2^24)", where,
                 max_position_embeddings);
  MOESERVE_CHECK(rms_norm_eps > 0, "{}: rms_norm_eps must be positive", where);
  const RopeConfig& p = rope.yarn_params;
  MOESERVE_CHECK(p.theta > 1, "{}: rope_theta {} must be above 1", where, p.theta);
  if (rope.yarn) {
    MOESERVE_CHECK(p.factor >= 1 && p.original_max_position > 0 && p.beta_fast > p.beta_slow && p.beta_slow > 0,
                   "{}: invalid YaRN parameters (factor >= 1, original_max_position_embeddings > 0, beta_fast > "
                   "beta_slow > 0)",
                   where);
    // transformers derives the factor as max_position_embeddings / original_max_position_embeddings, DeepSeek's
    // reference uses rope_scaling.factor; a config on which they disagree has no single meaning.
    const double ratio = static_cast<double>(max_position_embeddings) / static_cast<double>(p.original_max_position);
    MOESERVE_CHECK(std::fabs(ratio - p.factor) <= 1e-9 * p.factor,
                   "{}: rope_scaling factor {} disagrees with max_position_embeddings / original_max_position_"
                   "embeddings = {} / {} (transformers uses the ratio, DeepSeek's reference the factor)",
                   where, p.factor, max_position_embeddings, p.original_max_position);
    MOESERVE_CHECK(rope.mscale >= 0 && rope.mscale_all_dim >= 0, "{}: mscale and mscale_all_dim must not be negative",
                   where);
  }
  if (fp8)
    MOESERVE_CHECK(fp8_block_rows > 0 && fp8_block_cols > 0, "{}: weight_block_size must be positive", where);
  for (int32_t id : eos_token_ids)
    MOESERVE_CHECK(id >= 0 && id < vocab_size, "{}: eos_token_id {} is outside the vocabulary of {}", where, id,
                   vocab_size);
}

Config parse_config(const json& j, const std::string& where) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  const std::string model_type = required_field<std::string>(j, "model_type", where);
  MOESERVE_CHECK(model_type == "deepseek_v3", "{}: model_type \"{}\" is not deepseek_v3", where, model_type);
  Config c;
  c.num_layers = required_field<int>(j, "num_hidden_layers", where);
  c.hidden_size = required_field<int>(j, "hidden_size", where);
  c.intermediate_size = required_field<int>(j, "intermediate_size", where);
  c.moe_intermediate_size = required_field<int>(j, "moe_intermediate_size", where);
  c.num_heads = required_field<int>(j, "num_attention_heads", where);
  // MLA has as many key/value heads as query heads (transformers repeats num_heads / num_key_value_heads times).
  const int kv_heads = optional_field<int>(j, "num_key_value_heads", c.num_heads, where);
  MOESERVE_CHECK(kv_heads == c.num_heads, "{}: num_key_value_heads {} must equal num_attention_heads {} (MLA)", where,
                 kv_heads, c.num_heads);
  c.q_lora_rank = optional_field<int>(j, "q_lora_rank", 0, where);
  MOESERVE_CHECK(c.q_lora_rank != 0 || !j.contains("q_lora_rank") || j["q_lora_rank"].is_null(),
                 "{}: q_lora_rank 0 is ambiguous: use null for a plain q_proj", where);
  c.kv_lora_rank = required_field<int>(j, "kv_lora_rank", where);
  c.qk_nope_head_dim = required_field<int>(j, "qk_nope_head_dim", where);
  c.qk_rope_head_dim = required_field<int>(j, "qk_rope_head_dim", where);
  c.v_head_dim = required_field<int>(j, "v_head_dim", where);
  c.n_routed_experts = required_field<int>(j, "n_routed_experts", where);
  c.n_shared_experts = required_field<int>(j, "n_shared_experts", where);
  c.num_experts_per_tok = required_field<int>(j, "num_experts_per_tok", where);
  c.n_group = required_field<int>(j, "n_group", where);
  c.topk_group = required_field<int>(j, "topk_group", where);
  c.first_k_dense_replace = required_field<int>(j, "first_k_dense_replace", where);
  // Every layer from first_k_dense_replace on is MoE (transformers and DeepSeek's reference both ignore the field).
  const int moe_layer_freq = optional_field<int>(j, "moe_layer_freq", 1, where);
  MOESERVE_CHECK(moe_layer_freq == 1, "{}: moe_layer_freq {} is not supported (1: every layer after the dense ones)",
                 where, moe_layer_freq);
  const std::string topk_method = optional_field<std::string>(j, "topk_method", "noaux_tc", where);
  MOESERVE_CHECK(topk_method == "noaux_tc",
                 "{}: unknown topk_method \"{}\" (moeserve implements DeepSeek-V3's noaux_tc: group-limited top-k "
                 "over bias-corrected sigmoid scores)",
                 where, topk_method);
  const std::string scoring = optional_field<std::string>(j, "scoring_func", "sigmoid", where);
  MOESERVE_CHECK(scoring == "sigmoid", "{}: scoring_func \"{}\" is not supported (sigmoid)", where, scoring);
  c.norm_topk_prob = optional_field<bool>(j, "norm_topk_prob", true, where);
  c.routed_scaling_factor = optional_field<double>(j, "routed_scaling_factor", 2.5, where);  // transformers' default
  c.vocab_size = required_field<int>(j, "vocab_size", where);
  c.max_position_embeddings = required_field<int64_t>(j, "max_position_embeddings", where);
  c.rms_norm_eps = optional_field<double>(j, "rms_norm_eps", 1e-6, where);
  c.rope = parse_rope(j, where);
  c.num_nextn_predict_layers = optional_field<int>(j, "num_nextn_predict_layers", 0, where);
  const std::string act = optional_field<std::string>(j, "hidden_act", "silu", where);
  MOESERVE_CHECK(act == "silu", "{}: hidden_act \"{}\" is not supported (silu)", where, act);
  MOESERVE_CHECK(!optional_field<bool>(j, "attention_bias", false, where),
                 "{}: attention_bias true is not supported (DeepSeek-V3's projections have no bias)", where);
  MOESERVE_CHECK(!optional_field<bool>(j, "tie_word_embeddings", false, where),
                 "{}: tie_word_embeddings true is not supported (DeepSeek-V3 has a separate lm_head)", where);
  // transformers' rope_interleave (default true): the checkpoint's rope rows are in DeepSeek's adjacent-pair order.
  MOESERVE_CHECK(optional_field<bool>(j, "rope_interleave", true, where),
                 "{}: rope_interleave false is not supported (DeepSeek-V3 checkpoints pair adjacent rope values)", where);
  parse_quantization(j, c, where);
  c.bos_token_id = optional_field<int32_t>(j, "bos_token_id", 0, where);
  c.eos_token_ids = token_ids(j, "eos_token_id", where);
  c.source = j;
  c.validate(where);
  return c;
}

Config load_config(const std::string& dir) {
  std::string path;
  Config config = parse_config(read_config_json(dir, path), path);
  read_generation_eos(dir, config.eos_token_ids);
  for (int32_t id : config.eos_token_ids)
    MOESERVE_CHECK(id >= 0 && id < config.vocab_size, "{}/generation_config.json: eos_token_id {} is outside the "
                   "vocabulary of {}", dir, id, config.vocab_size);
  return config;
}

json to_config_json(const Config& c) {
  // Key for key the shape of deepseek-ai/DeepSeek-R1's config.json (without auto_map: no remote code here).
  json rope = nullptr;
  if (c.rope.yarn) {
    const RopeConfig& p = c.rope.yarn_params;
    rope = {{"beta_fast", p.beta_fast},
            {"beta_slow", p.beta_slow},
            {"factor", p.factor},
            {"mscale", c.rope.mscale},
            {"mscale_all_dim", c.rope.mscale_all_dim},
            {"original_max_position_embeddings", p.original_max_position},
            {"type", "yarn"}};
  }
  json j = {{"architectures", {"DeepseekV3ForCausalLM"}},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"bos_token_id", c.bos_token_id},
            {"eos_token_id", c.eos_token_ids.empty() ? json(nullptr) : json(c.eos_token_ids.front())},
            {"ep_size", 1},
            {"first_k_dense_replace", c.first_k_dense_replace},
            {"hidden_act", "silu"},
            {"hidden_size", c.hidden_size},
            {"initializer_range", 0.02},
            {"intermediate_size", c.intermediate_size},
            {"kv_lora_rank", c.kv_lora_rank},
            {"max_position_embeddings", c.max_position_embeddings},
            {"model_type", "deepseek_v3"},
            {"moe_intermediate_size", c.moe_intermediate_size},
            {"moe_layer_freq", 1},
            {"n_group", c.n_group},
            {"n_routed_experts", c.n_routed_experts},
            {"n_shared_experts", c.n_shared_experts},
            {"norm_topk_prob", c.norm_topk_prob},
            {"num_attention_heads", c.num_heads},
            {"num_experts_per_tok", c.num_experts_per_tok},
            {"num_hidden_layers", c.num_layers},
            {"num_key_value_heads", c.num_heads},
            {"num_nextn_predict_layers", c.num_nextn_predict_layers},
            {"q_lora_rank", c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr)},
            {"qk_nope_head_dim", c.qk_nope_head_dim},
            {"qk_rope_head_dim", c.qk_rope_head_dim},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_scaling", rope},
            {"rope_theta", c.rope.yarn_params.theta},
            {"routed_scaling_factor", c.routed_scaling_factor},
            {"scoring_func", "sigmoid"},
            {"tie_word_embeddings", false},
            {"topk_group", c.topk_group},
            {"topk_method", "noaux_tc"},
            {"torch_dtype", "bfloat16"},
            {"use_cache", true},
            {"v_head_dim", c.v_head_dim},
            {"vocab_size", c.vocab_size}};
  if (c.fp8)
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {c.fp8_block_rows, c.fp8_block_cols}}};
  return j;
}

}  // namespace moeserve::deepseek_v3
