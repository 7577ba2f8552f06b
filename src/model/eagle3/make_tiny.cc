#include "model/eagle3/make_tiny.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "model/safetensors.h"
#include "model/tiny_random.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve {

speculative::Eagle3Config tiny_eagle3_config(const TinyEagle3Options& o, const ModelConfig& target) {
  MOESERVE_CHECK(o.names == "midlayer" || o.names == "layers", "--eagle3-names \"{}\": midlayer or layers", o.names);
  speculative::Eagle3Config c;
  c.hidden_size = target.hidden_size;  // the head shares the target's embedding, so it has the target's width
  c.intermediate_size = 2 * target.hidden_size;
  c.num_heads = target.num_heads;
  c.num_kv_heads = target.num_kv_heads;
  c.head_dim = target.head_dim;
  c.rms_norm_eps = target.rms_norm_eps;
  // Llama 3.1's scaling (NVIDIA's long-context head is reported to use llama3 x8), so the tiny head exercises it.
  c.rope.theta = 500000.0;
  c.rope.scaling = speculative::LlamaRope::Scaling::llama3;
  c.rope.factor = 8.0;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position = 8192;
  c.max_position_embeddings = target.max_position_embeddings;
  c.vocab_size = target.vocab_size;
  c.draft_vocab_size = o.draft_vocab > 0 ? o.draft_vocab : std::min(32000, target.vocab_size / 2);
  MOESERVE_CHECK(c.draft_vocab_size > 0 && c.draft_vocab_size < target.vocab_size,
                 "--draft-vocab {} must be in 1..{} (smaller than the target's vocabulary)", c.draft_vocab_size,
                 target.vocab_size - 1);
  c.target_hidden_size = target.hidden_size;
  // Low, middle and high layers, as EAGLE-3 fuses; distinct for any target depth.
  const int n = target.num_layers;
  std::set<int> ids = {0, n / 2, n - 1};
  c.aux_layer_ids.assign(ids.begin(), ids.end());
  c.norm_before_fc = o.input_norm;
  return c;
}

void make_tiny_eagle3(const TinyEagle3Options& o, const std::string& target_dir, const std::string& out_dir) {
  namespace fs = std::filesystem;
  const ModelConfig target = load_model_config(target_dir);
  const speculative::Eagle3Config c = tiny_eagle3_config(o, target);
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size, F = c.feature_width(),
                DV = c.draft_vocab_size;
  ThreadPool pool;
  std::vector<TensorToWrite> tensors;
  auto bf16 = [&](const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    tensors.push_back({name, DType::BF16, shape, [&pool, seed = o.seed, name, n, mean, std] {
                         return tiny_random::bf16_normal(pool, seed, "eagle3." + name, n, mean, std);
                       }});
  };
  auto gain = [](int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };
  const std::string p = o.names == "midlayer" ? "midlayer." : "layers.0.";
  bf16("fc.weight", {H, F}, 0.0f, gain(F));
  if (o.input_norm) bf16("input_norm.weight", {F}, 1.0f, 0.1f);
  bf16(p + "hidden_norm.weight", {H}, 1.0f, 0.1f);
  bf16(p + "input_layernorm.weight", {H}, 1.0f, 0.1f);
  bf16(p + "post_attention_layernorm.weight", {H}, 1.0f, 0.1f);
  bf16(p + "self_attn.q_proj.weight", {Q, 2 * H}, 0.0f, gain(2 * H));
  bf16(p + "self_attn.k_proj.weight", {KV, 2 * H}, 0.0f, gain(2 * H));
  bf16(p + "self_attn.v_proj.weight", {KV, 2 * H}, 0.0f, gain(2 * H));
  bf16(p + "self_attn.o_proj.weight", {H, Q}, 0.0f, gain(Q));
  bf16(p + "mlp.gate_proj.weight", {I, H}, 0.0f, gain(H));
  bf16(p + "mlp.up_proj.weight", {I, H}, 0.0f, gain(H));
  bf16(p + "mlp.down_proj.weight", {H, I}, 0.0f, gain(I));
  bf16("norm.weight", {H}, 1.0f, 0.1f);
  bf16("lm_head.weight", {DV, H}, 0.0f, 2.0f * gain(H));
  // The draft vocabulary: target ids spread evenly over the vocabulary, ascending, as offsets from draft ids.
  tensors.push_back({"d2t", DType::I64, {DV}, [DV, V = int64_t{c.vocab_size}] {
                       std::vector<uint8_t> bytes(DV * sizeof(int64_t));
                       for (int64_t id = 0; id < DV; ++id) {
                         const int64_t offset = id * V / DV - id;
                         std::memcpy(bytes.data() + id * sizeof(int64_t), &offset, sizeof(int64_t));
                       }
                       return bytes;
                     }});

  fs::create_directories(out_dir);
  write_text_file((fs::path(out_dir) / "config.json").string(), speculative::to_eagle3_config_json(c).dump(2) + "\n");
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), std::move(tensors), {{"format", "pt"}});
}

}  // namespace moeserve
