#include "model/gpt_oss/make_tiny.h"

#include <cmath>
#include <filesystem>
#include <functional>

#include "model/checkpoint_writer.h"
#include "model/gpt_oss/shapes.h"
#include "model/mxfp4.h"
#include "model/safetensors.h"
#include "model/tiny_random.h"
#include "util/bfloat16.h"
#include "util/error.h"
#include "util/files.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using tiny_random::element_bits;
using tiny_random::name_key;

struct Generator {
  uint64_t seed;
  ThreadPool* pool;

  std::vector<uint8_t> bf16_normal(const std::string& name, int64_t n, float mean, float std) const {
    return tiny_random::bf16_normal(*pool, seed, name, n, mean, std);
  }

  std::vector<uint8_t> fp4_blocks(const std::string& name, int64_t n) const {
    std::vector<uint8_t> bytes(n);
    uint64_t key = name_key(seed, name);
    pool->parallel_for(n / 8, 1 << 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        uint64_t bits = element_bits(key, i);
        for (int j = 0; j < 8; ++j) bytes[i * 8 + j] = static_cast<uint8_t>(bits >> (8 * j));
      }
    });
    return bytes;
  }

  // E8M0 scales spread over [exponent - 1, exponent] around 2^exponent.
  std::vector<uint8_t> e8m0_scales(const std::string& name, int64_t n, int exponent) const {
    std::vector<uint8_t> bytes(n);
    uint64_t key = name_key(seed, name);
    pool->parallel_for(n, 1 << 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) bytes[i] = static_cast<uint8_t>(127 + exponent - (element_bits(key, i) & 1));
    });
    return bytes;
  }

  // Dense experts in Hugging Face's dequantised layout [E, in, out]: the same values the MXFP4 tensors of the
  // same names would hold, transposed, so both formats describe one model.
  std::vector<uint8_t> dense_experts(const std::string& blocks_name, const std::string& scales_name, int64_t E,
                                     int64_t out, int64_t in, int exponent) const {
    auto blocks = fp4_blocks(blocks_name, E * out * in / 2);
    auto scales = e8m0_scales(scales_name, E * out * in / kMxfp4BlockSize, exponent);
    ExpertMatrix m;
    m.num_experts = E;
    m.out_features = out;
    m.in_features = in;
    m.blocks = blocks.data();
    m.scales = scales.data();
    std::vector<uint8_t> bytes(E * out * in * 2);
    auto* dst = reinterpret_cast<uint16_t*>(bytes.data());
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < out; ++r)
        for (int64_t k = 0; k < in; ++k) dst[(e * in + k) * out + r] = float_to_bf16(m.weight(e, r, k));
    return bytes;
  }
};

// The MXFP4 magnitude: e2m1 values drawn uniformly have an RMS of about 2.93; pick the power of two that gives
// outputs of standard deviation `target` for unit-RMS inputs of dimension fan_in.
int mxfp4_exponent(int64_t fan_in, double target) {
  return static_cast<int>(std::lround(std::log2(target / (std::sqrt(static_cast<double>(fan_in)) * 2.93))));
}

struct TensorPlan {
  std::vector<TensorToWrite> tensors;
  std::map<std::string, std::string> original_dtypes;
};

TensorPlan plan_tensors(const ModelConfig& c, const TinyModelOptions& options, const Generator& gen) {
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts, I = c.intermediate_size,
                V = c.vocab_size;
  const bool hf = options.layout == CheckpointLayout::huggingface;
  TensorPlan plan;
  // Contents are keyed by the Hugging Face name in both layouts, so both layouts hold the same model; `name` is
  // what the file calls the tensor.
  auto bf16 = [&](const std::string& name, const std::string& key, std::vector<int64_t> shape, float mean,
                  float std) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    plan.original_dtypes[name] = "BF16";
    plan.tensors.push_back({name, DType::BF16, shape, [&gen, key, n, mean, std] {
                              return gen.bf16_normal(key, n, mean, std);
                            }});
  };
  // The original layout's fused qkv: the q, k and v tensors of the Hugging Face layout, stacked.
  auto fused = [&](const std::string& name, std::vector<std::string> keys, std::vector<int64_t> sizes,
                   int64_t cols, float mean, float std) {
    int64_t rows = 0;
    for (auto s : sizes) rows += s;
    std::vector<int64_t> shape = cols > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
    plan.original_dtypes[name] = "BF16";
    plan.tensors.push_back({name, DType::BF16, shape, [&gen, keys, sizes, cols, mean, std] {
                              std::vector<uint8_t> all;
                              for (size_t i = 0; i < keys.size(); ++i) {
                                auto part = gen.bf16_normal(keys[i], sizes[i] * std::max<int64_t>(cols, 1), mean, std);
                                all.insert(all.end(), part.begin(), part.end());
                              }
                              return all;
                            }});
  };
  // Gains chosen so the tiny model's activations are O(1) and its SwiGLU clamp (limit 7) is reached.
  const float in_gain = 1.0f / std::sqrt(static_cast<float>(H));
  const int mlp1_exponent = mxfp4_exponent(H, 5.0);
  const int mlp2_exponent = mxfp4_exponent(I, 0.2);
  auto experts = [&](const std::string& dense_name, const std::string& blocks, const std::string& scales,
                     const std::string& key, int64_t out, int64_t in, int exponent) {
    std::string blocks_key = key + "_blocks", scales_key = key + "_scales";
    if (options.expert_format == ExpertFormat::dense) {
      plan.tensors.push_back({dense_name, DType::BF16, {E, in, out},
                              [&gen, blocks_key, scales_key, E, out, in, exponent] {
                                return gen.dense_experts(blocks_key, scales_key, E, out, in, exponent);
                              }});
      return;
    }
    int64_t nblocks = E * out * in / kMxfp4BlockSize;
    plan.original_dtypes[blocks] = "FP4";
    plan.original_dtypes[scales] = "UE8";
    plan.tensors.push_back({blocks, DType::U8, {E, out, in / kMxfp4BlockSize, kMxfp4BlockBytes},
                            [&gen, blocks_key, nblocks] {
                              return gen.fp4_blocks(blocks_key, nblocks * kMxfp4BlockBytes);
                            }});
    plan.tensors.push_back({scales, DType::U8, {E, out, in / kMxfp4BlockSize},
                            [&gen, scales_key, nblocks, exponent] {
                              return gen.e8m0_scales(scales_key, nblocks, exponent);
                            }});
  };
  auto name = [&](const std::string& hf_name, const std::string& original_name) {
    return hf ? hf_name : original_name;
  };

  bf16(name("model.embed_tokens.weight", "embedding.weight"), "model.embed_tokens.weight", {V, H}, 0.0f, 1.0f);
  bf16(name("lm_head.weight", "unembedding.weight"), "lm_head.weight", {V, H}, 0.0f, 2.0f * in_gain);
  bf16(name("model.norm.weight", "norm.scale"), "model.norm.weight", {H}, 1.0f, 0.1f);
  for (int i = 0; i < c.num_layers; ++i) {
    std::string p = fmt::format("model.layers.{}.", i);
    std::string b = fmt::format("block.{}.", i);
    bf16(name(p + "input_layernorm.weight", b + "attn.norm.scale"), p + "input_layernorm.weight", {H}, 1.0f, 0.1f);
    bf16(name(p + "post_attention_layernorm.weight", b + "mlp.norm.scale"), p + "post_attention_layernorm.weight",
         {H}, 1.0f, 0.1f);
    bf16(name(p + "self_attn.sinks", b + "attn.sinks"), p + "self_attn.sinks", {c.num_heads}, 0.0f, 1.0f);
    std::string a = p + "self_attn.";
    if (hf) {
      bf16(a + "q_proj.weight", a + "q_proj.weight", {Q, H}, 0.0f, in_gain);
      bf16(a + "k_proj.weight", a + "k_proj.weight", {KV, H}, 0.0f, in_gain);
      bf16(a + "v_proj.weight", a + "v_proj.weight", {KV, H}, 0.0f, in_gain);
      bf16(a + "q_proj.bias", a + "q_proj.bias", {Q}, 0.0f, 0.2f);
      bf16(a + "k_proj.bias", a + "k_proj.bias", {KV}, 0.0f, 0.2f);
      bf16(a + "v_proj.bias", a + "v_proj.bias", {KV}, 0.0f, 0.2f);
    } else {
      fused(b + "attn.qkv.weight", {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, {Q, KV, KV}, H,
            0.0f, in_gain);
      fused(b + "attn.qkv.bias", {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}, {Q, KV, KV}, 0, 0.0f,
            0.2f);
    }
    bf16(name(a + "o_proj.weight", b + "attn.out.weight"), a + "o_proj.weight", {H, Q}, 0.0f,
         1.0f / std::sqrt(static_cast<float>(Q)));
    bf16(name(a + "o_proj.bias", b + "attn.out.bias"), a + "o_proj.bias", {H}, 0.0f, 0.2f);
    bf16(name(p + "mlp.router.weight", b + "mlp.gate.weight"), p + "mlp.router.weight", {E, H}, 0.0f, in_gain);
    bf16(name(p + "mlp.router.bias", b + "mlp.gate.bias"), p + "mlp.router.bias", {E}, 0.0f, 0.5f);
    std::string x = p + "mlp.experts.";
    experts(x + "gate_up_proj", name(x + "gate_up_proj_blocks", b + "mlp.mlp1_weight.blocks"),
            name(x + "gate_up_proj_scales", b + "mlp.mlp1_weight.scales"), x + "gate_up_proj", 2 * I, H,
            mlp1_exponent);
    experts(x + "down_proj", name(x + "down_proj_blocks", b + "mlp.mlp2_weight.blocks"),
            name(x + "down_proj_scales", b + "mlp.mlp2_weight.scales"), x + "down_proj", H, I, mlp2_exponent);
    bf16(name(x + "gate_up_proj_bias", b + "mlp.mlp1_bias"), x + "gate_up_proj_bias", {E, 2 * I}, 0.0f, 0.5f);
    bf16(name(x + "down_proj_bias", b + "mlp.mlp2_bias"), x + "down_proj_bias", {E, H}, 0.0f, 0.5f);
  }
  return plan;
}

}  // namespace

ModelConfig tiny_model_config(const TinyModelOptions& o) {
  ModelConfig c;
  c.num_layers = o.layers;
  c.hidden_size = o.hidden;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads;
  c.head_dim = o.head_dim;
  c.num_experts = o.experts;
  c.experts_per_token = o.top_k;
  c.intermediate_size = o.intermediate;
  c.vocab_size = o.vocab;
  c.sliding_window = o.window;
  if (!o.shape.empty()) gpt_oss::apply_known_shape(o.shape, c);
  c.max_position_embeddings = 131072;
  c.rope = RopeConfig{};
  c.layout = o.layout;
  // <|return|>, <|endoftext|>, <|call|>: generation_config.json of openai/gpt-oss-20b (full vocabulary only).
  if (c.vocab_size > 200012) c.eos_token_ids = {200002, 199999, 200012};
  for (int i = 0; i < c.num_layers; ++i) c.layer_types.push_back(i % 2 == 0 ? AttentionKind::sliding : AttentionKind::full);
  c.validate("make-tiny options");
  MOESERVE_CHECK(o.shards >= 1, "--shards must be at least 1");
  MOESERVE_CHECK(o.layout == CheckpointLayout::huggingface || o.expert_format == ExpertFormat::mxfp4,
                 "the original layout stores experts in MXFP4 only");
  return c;
}

void make_tiny_checkpoint(const TinyModelOptions& options, const std::string& out_dir) {
  namespace fs = std::filesystem;
  ModelConfig config = tiny_model_config(options);
  fs::create_directories(out_dir);
  ThreadPool pool;
  Generator gen{options.seed, &pool};
  TensorPlan plan = plan_tensors(config, options, gen);

  const bool hf = options.layout == CheckpointLayout::huggingface;
  nlohmann::json config_json = hf ? to_hf_config_json(config) : to_original_config_json(config);
  if (hf && options.expert_format == ExpertFormat::dense) config_json.erase("quantization_config");
  write_text_file((fs::path(out_dir) / "config.json").string(), config_json.dump(2) + "\n");
  nlohmann::json generation = {{"do_sample", true}, {"eos_token_id", config.eos_token_ids}};
  if (config.vocab_size > 199999) {
    generation["bos_token_id"] = 199998;
    generation["pad_token_id"] = 199999;
  }
  write_text_file((fs::path(out_dir) / "generation_config.json").string(), generation.dump(2) + "\n");
  if (!hf) {
    nlohmann::json dtypes(plan.original_dtypes);
    write_text_file((fs::path(out_dir) / "dtypes.json").string(), dtypes.dump(2) + "\n");
  }

  // The original layout's double dash is OpenAI's own: openai/gpt-oss-120b's original/ holds model--00001-of-00007
  // to model--00007-of-00007.safetensors beside model.safetensors.index.json.
  write_checkpoint_tensors(out_dir, std::move(plan.tensors), options.shards,
                           hf ? kHfShardName : "model--{:05d}-of-{:05d}.safetensors");
}

}  // namespace moeserve
