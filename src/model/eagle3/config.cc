#include "model/eagle3/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <set>

#include "model/config.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_fields.h"

namespace moeserve::speculative {
namespace {

using nlohmann::json;

LlamaRope parse_rope(const json& j, const std::string& where) {
  LlamaRope rope;
  rope.theta = optional_field<double>(j, "rope_theta", rope.theta, where);
  // transformers' newer rope_parameters, or the classic rope_scaling; both absent or null: plain RoPE.
  const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling" : "rope_parameters";
  if (!j.contains(key) || j[key].is_null()) return rope;
  const json& scaling = j[key];
  const std::string at = where + " " + key;
  MOESERVE_CHECK(scaling.is_object(), "{}: not a JSON object", at);
  rope.theta = optional_field<double>(scaling, "rope_theta", rope.theta, at);
  std::string type = optional_field<std::string>(
      scaling, "rope_type", optional_field<std::string>(scaling, "type", "default", at), at);
  if (type == "default") return rope;
  MOESERVE_CHECK(type == "llama3", "{}: rope_type \"{}\" is not supported (default or llama3)", at, type);
  rope.scaling = LlamaRope::Scaling::llama3;
  rope.factor = required_field<double>(scaling, "factor", at);
  rope.low_freq_factor = required_field<double>(scaling, "low_freq_factor", at);
  rope.high_freq_factor = required_field<double>(scaling, "high_freq_factor", at);
  rope.original_max_position = required_field<int64_t>(scaling, "original_max_position_embeddings", at);
  MOESERVE_CHECK(rope.factor >= 1, "{}: factor {} must be at least 1", at, rope.factor);
  MOESERVE_CHECK(rope.high_freq_factor > rope.low_freq_factor && rope.low_freq_factor > 0,
                 "{}: high_freq_factor {} must exceed low_freq_factor {} > 0", at, rope.high_freq_factor,
                 rope.low_freq_factor);
  in_range<int64_t>(rope.original_max_position, 1, config_limits::kPositions, at, "original_max_position_embeddings");
  return rope;
}

// A flag that exporters put either at the top level or inside eagle_config (vLLM PR #42143: NVIDIA's gpt-oss
// drafts keep norm_before_fc in eagle_config). Both present and different is an error, not a guess.
bool flag(const json& top, const json& eagle, const char* key, const std::string& where) {
  const bool in_top = top.contains(key) && !top[key].is_null();
  const bool in_eagle = eagle.contains(key) && !eagle[key].is_null();
  const bool top_value = optional_field<bool>(top, key, false, where);
  const bool eagle_value = optional_field<bool>(eagle, key, false, where + " eagle_config");
  MOESERVE_CHECK(!(in_top && in_eagle && top_value != eagle_value),
                 "{}: \"{}\" is {} at the top level but {} in eagle_config", where, key, top_value, eagle_value);
  return in_eagle ? eagle_value : top_value;
}

std::vector<int> parse_aux_layer_ids(const json& eagle, const std::string& where, int target_num_layers) {
  const char* key = "eagle_aux_hidden_state_layer_ids";
  if (!eagle.contains(key) || eagle[key].is_null()) return default_aux_layer_ids(target_num_layers);
  const std::vector<int> ids = required_field<std::vector<int>>(eagle, key, where + " eagle_config");
  MOESERVE_CHECK(!ids.empty(), "{} eagle_config: \"{}\" is empty", where, key);
  for (size_t i = 0; i < ids.size(); ++i) {
    MOESERVE_CHECK(ids[i] >= 0 && ids[i] < target_num_layers,
                   "{} eagle_config: \"{}\" names layer {}, but the target has {} layers", where, key, ids[i],
                   target_num_layers);
    // Features are concatenated in ascending layer order (EAGLE-3 low, mid, high).
    MOESERVE_CHECK(i == 0 || ids[i] > ids[i - 1], "{} eagle_config: \"{}\" must be strictly ascending, got {}",
                   where, key, json(ids).dump());
  }
  return ids;
}

void validate(const Eagle3Config& c, const std::string& where) {
  // The target's bounds (model/config.h) bound the head too: nothing is sized before they are checked.
  namespace limits = config_limits;
  auto positive = [&](int64_t value, const char* field, int64_t most) {
    MOESERVE_CHECK(value > 0, "{}: \"{}\" must be positive, got {}", where, field, value);
    in_range<int64_t>(value, 1, most, where, field);
  };
  positive(c.hidden_size, "hidden_size", limits::kHiddenSize);
  positive(c.intermediate_size, "intermediate_size", limits::kIntermediateSize);
  positive(c.num_heads, "num_attention_heads", limits::kHeads);
  positive(c.num_kv_heads, "num_key_value_heads", limits::kHeads);
  positive(c.head_dim, "head_dim", limits::kHeadDim);
  positive(c.vocab_size, "vocab_size", limits::kVocabSize);
  positive(c.draft_vocab_size, "draft_vocab_size", limits::kVocabSize);
  positive(c.target_hidden_size, "target_hidden_size", limits::kHiddenSize);
  positive(c.max_position_embeddings, "max_position_embeddings", limits::kPositions);
  in_range(c.rope.theta, 1.0, limits::kRopeValue, where, "rope_theta");
  in_range(c.rope.factor, 1.0, limits::kRopeValue, where, "rope factor");
  in_range(c.rope.high_freq_factor, 0.0, limits::kRopeValue, where, "high_freq_factor");
  MOESERVE_CHECK(c.num_heads % c.num_kv_heads == 0,
                 "{}: \"num_attention_heads\" {} must be a multiple of \"num_key_value_heads\" {}", where, c.num_heads,
                 c.num_kv_heads);
  MOESERVE_CHECK(c.head_dim % 2 == 0, "{}: \"head_dim\" {} must be even (RoPE pairs)", where, c.head_dim);
  MOESERVE_CHECK(c.draft_vocab_size <= c.vocab_size, "{}: \"draft_vocab_size\" {} exceeds \"vocab_size\" {}", where,
                 c.draft_vocab_size, c.vocab_size);
  MOESERVE_CHECK(c.rms_norm_eps > 0, "{}: \"rms_norm_eps\" must be positive", where);
  MOESERVE_CHECK(c.rope.theta > 1, "{}: \"rope_theta\" {} must exceed 1", where, c.rope.theta);
}

}  // namespace

std::vector<int> default_aux_layer_ids(int n) {
  MOESERVE_CHECK(n >= 4, "a target of {} layers has no default EAGLE-3 aux layers {{1, N/2-1, N-4}}; the draft's "
                 "eagle_config must name eagle_aux_hidden_state_layer_ids", n);
  std::set<int> ids = {1, n / 2 - 1, n - 4};
  return {ids.begin(), ids.end()};
}

Eagle3Config parse_eagle3_config(const json& j, const std::string& where, int target_num_layers) {
  MOESERVE_CHECK(j.is_object(), "{}: not a JSON object", where);
  const auto architectures = required_field<std::vector<std::string>>(j, "architectures", where);
  MOESERVE_CHECK(architectures.size() == 1 && architectures[0] == "LlamaForCausalLMEagle3",
                 "{}: \"architectures\" is {}, not [\"LlamaForCausalLMEagle3\"]", where, j["architectures"].dump());
  const int layers = optional_field<int>(j, "num_hidden_layers", 1, where);
  MOESERVE_CHECK(layers == 1, "{}: \"num_hidden_layers\" is {}; an EAGLE-3 head has one decoder layer", where, layers);
  const json eagle = j.contains("eagle_config") && !j["eagle_config"].is_null() ? j["eagle_config"] : json::object();
  MOESERVE_CHECK(eagle.is_object(), "{}: \"eagle_config\" is not a JSON object", where);
  MOESERVE_CHECK(!flag(j, eagle, "norm_output", where),
                 "{}: \"norm_output\" (EAGLE-3.1, post-norm feedback) is not supported", where);

  Eagle3Config c;
  c.hidden_size = required_field<int>(j, "hidden_size", where);
  c.intermediate_size = required_field<int>(j, "intermediate_size", where);
  c.num_heads = required_field<int>(j, "num_attention_heads", where);
  c.num_kv_heads = optional_field<int>(j, "num_key_value_heads", c.num_heads, where);
  c.head_dim = optional_field<int>(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0, where);
  c.rms_norm_eps = optional_field<double>(j, "rms_norm_eps", c.rms_norm_eps, where);
  c.rope = parse_rope(j, where);
  c.max_position_embeddings = optional_field<int64_t>(j, "max_position_embeddings", 131072, where);
  c.vocab_size = required_field<int>(j, "vocab_size", where);
  c.draft_vocab_size = optional_field<int>(j, "draft_vocab_size", c.vocab_size, where);
  c.target_hidden_size = optional_field<int>(j, "target_hidden_size", c.hidden_size, where);
  c.aux_layer_ids = parse_aux_layer_ids(eagle, where, target_num_layers);
  c.norm_before_fc = flag(j, eagle, "norm_before_fc", where);
  c.norm_before_residual = flag(j, eagle, "norm_before_residual", where);
  c.source = j;
  validate(c, where);
  return c;
}

Eagle3Config load_eagle3_config(const std::string& dir, int target_num_layers) {
  MOESERVE_CHECK(std::filesystem::is_directory(dir), "draft model directory {} does not exist", dir);
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  MOESERVE_CHECK(file_exists(path), "{} has no config.json", dir);
  return parse_eagle3_config(read_json_file(path), path, target_num_layers);
}

json to_eagle3_config_json(const Eagle3Config& c) {
  json rope_scaling = nullptr;
  if (c.rope.scaling == LlamaRope::Scaling::llama3)
    rope_scaling = {{"factor", c.rope.factor},
                    {"high_freq_factor", c.rope.high_freq_factor},
                    {"low_freq_factor", c.rope.low_freq_factor},
                    {"original_max_position_embeddings", c.rope.original_max_position},
                    {"rope_type", "llama3"}};
  json eagle = {{"eagle_aux_hidden_state_layer_ids", c.aux_layer_ids},
                {"use_aux_hidden_state", true},
                {"use_input_layernorm_in_first_layer", true},
                {"use_last_layernorm", true},
                {"use_mtp_layernorm", false}};
  if (c.norm_before_fc) eagle["norm_before_fc"] = true;
  json j = {{"architectures", {"LlamaForCausalLMEagle3"}},
            {"attention_bias", false},
            {"draft_vocab_size", c.draft_vocab_size},
            {"eagle_config", eagle},
            {"head_dim", c.head_dim},
            {"hidden_act", "silu"},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"max_position_embeddings", c.max_position_embeddings},
            {"model_type", "llama"},
            {"num_attention_heads", c.num_heads},
            {"num_hidden_layers", 1},
            {"num_key_value_heads", c.num_kv_heads},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_scaling", rope_scaling},
            {"rope_theta", c.rope.theta},
            {"tie_word_embeddings", false},
            {"vocab_size", c.vocab_size}};
  if (c.norm_before_residual) j["norm_before_residual"] = true;
  if (c.target_hidden_size != c.hidden_size) j["target_hidden_size"] = c.target_hidden_size;
  return j;
}

std::vector<float> llama_rope_inverse_frequencies(const LlamaRope& rope, int head_dim) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2) / dim) in fp32.
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(rope.theta),
                                  static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  if (rope.scaling == LlamaRope::Scaling::none) return inv_freq;
  const double old_context = static_cast<double>(rope.original_max_position);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;
  for (float& f : inv_freq) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = static_cast<float>(f / rope.factor);
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth =
          (old_context / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
      f = static_cast<float>((1 - smooth) * f / rope.factor + smooth * f);
    }
  }
  return inv_freq;
}

}  // namespace moeserve::speculative
