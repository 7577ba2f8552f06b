#include "model/deepseek_v3/make_tiny.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "model/checkpoint_writer.h"
#include "model/deepseek_v3/shapes.h"
#include "model/fp8_blocks.h"
#include "model/safetensors.h"
#include "model/tiny_random.h"
#include "util/error.h"
#include "util/files.h"
#include "util/thread_pool.h"

#ifndef MOESERVE_DEEPSEEK_TOKENIZER_DIR_DEFAULT
#define MOESERVE_DEEPSEEK_TOKENIZER_DIR_DEFAULT ""
#endif

namespace moeserve::deepseek_v3 {
namespace {

using tiny_random::element_bits;
using tiny_random::element_normal;
using tiny_random::name_key;

constexpr int kRealVocabulary = 129280;

std::vector<uint8_t> float_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// One FP8 weight and its scales, quantised from N(0, std) values block by block.
struct Fp8Weight {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
};

class Generator {
 public:
  Generator(uint64_t seed, const Config& c) : seed_(seed), config_(c) {}

  std::vector<uint8_t> bf16_normal(const std::string& name, int64_t n, float mean, float std) const {
    return tiny_random::bf16_normal(pool_, seed_, name, n, mean, std);
  }

  // U[0, high) floats: the top 24 bits of each hash as a fraction, exact in float.
  std::vector<uint8_t> f32_uniform(const std::string& name, int64_t n, float high) const {
    std::vector<float> values(n);
    const uint64_t key = name_key(seed_, name);
    for (int64_t i = 0; i < n; ++i)
      values[i] = static_cast<float>(element_bits(key, i) >> 40) * (1.0f / 16777216.0f) * high;
    return float_bytes(values);
  }

  Fp8Weight fp8_normal(const std::string& name, int64_t rows, int64_t cols, float std) const {
    std::vector<float> values(rows * cols);
    const uint64_t key = name_key(seed_, name);
    pool_.parallel_for(values.size(), 1 << 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) values[i] = std * element_normal(element_bits(key, i));
    });
    const int64_t br = config_.fp8_block_rows, bc = config_.fp8_block_cols;
    const int64_t scale_rows = (rows + br - 1) / br, scale_cols = (cols + bc - 1) / bc;
    std::vector<float> scales(scale_rows * scale_cols);
    Fp8Weight w;
    w.data.resize(values.size());
    pool_.parallel_for(scale_rows, 1, [&](size_t b0, size_t b1) {
      for (size_t sr = b0; sr < b1; ++sr) {
        const int64_t r0 = static_cast<int64_t>(sr) * br, r1 = std::min(rows, r0 + br);
        for (int64_t sc = 0; sc < scale_cols; ++sc) {
          const int64_t c0 = sc * bc, c1 = std::min(cols, c0 + bc);
          float amax = 0.0f;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(values[r * cols + c]));
          const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
          scales[sr * scale_cols + sc] = scale;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) w.data[r * cols + c] = float_to_fp8_e4m3(values[r * cols + c] / scale);
        }
      }
    });
    w.scales = float_bytes(scales);
    return w;
  }

 private:
  uint64_t seed_;
  const Config& config_;
  mutable ThreadPool pool_;
};

// The tensors of the checkpoint, each filled when written. An FP8 weight's scales come out of the same
// quantisation as its bytes, which the weight (written first: ".weight" sorts before ".weight_scale_inv") leaves
// for them.
class TensorPlan {
 public:
  TensorPlan(const Config& c, const Generator& gen) : c_(c), gen_(gen) {}

  std::vector<TensorToWrite> take() { return std::move(tensors_); }

  void bf16(const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    const int64_t n = count(shape);
    tensors_.push_back({name, DType::BF16, shape, [this, name, n, mean, std] { return gen_.bf16_normal(name, n, mean, std); }});
  }
  void norm(const std::string& name, int64_t size) { bf16(name, {size}, 1.0f, 0.1f); }

  // `name`.weight [rows, cols] ~ N(0, gain / sqrt(cols)): FP8 with scales, or bf16.
  void linear(const std::string& name, int64_t rows, int64_t cols, float gain = 1.0f) {
    const float std = gain / std::sqrt(static_cast<float>(cols));
    const std::string weight = name + ".weight";
    if (!c_.fp8) return bf16(weight, {rows, cols}, 0.0f, std);
    const std::string scale = name + ".weight_scale_inv";
    auto stash = stash_;
    tensors_.push_back({weight, DType::F8_E4M3, {rows, cols}, [this, stash, weight, scale, rows, cols, std] {
                          Fp8Weight w = gen_.fp8_normal(weight, rows, cols, std);
                          std::lock_guard lock(stash->mutex);
                          stash->scales[scale] = std::move(w.scales);
                          return std::move(w.data);
                        }});
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    tensors_.push_back({scale, DType::F32, {(rows + br - 1) / br, (cols + bc - 1) / bc},
                        [this, stash, weight, scale, rows, cols, std] {
                          std::unique_lock lock(stash->mutex);
                          const auto it = stash->scales.find(scale);
                          if (it == stash->scales.end()) {
                            lock.unlock();
                            return gen_.fp8_normal(weight, rows, cols, std).scales;
                          }
                          std::vector<uint8_t> bytes = std::move(it->second);
                          stash->scales.erase(it);
                          return bytes;
                        }});
  }

  void mlp(const std::string& prefix, int64_t intermediate) {
    linear(prefix + "gate_proj", intermediate, c_.hidden_size);
    linear(prefix + "up_proj", intermediate, c_.hidden_size);
    linear(prefix + "down_proj", c_.hidden_size, intermediate);
  }

  void layer(int index) {
    const std::string p = fmt::format("model.layers.{}.", index);
    const int64_t H = c_.hidden_size, heads = c_.num_heads, E = c_.n_routed_experts;
    norm(p + "input_layernorm.weight", H);
    norm(p + "post_attention_layernorm.weight", H);
    const std::string a = p + "self_attn.";
    if (c_.q_lora_rank > 0) {
      linear(a + "q_a_proj", c_.q_lora_rank, H);
      norm(a + "q_a_layernorm.weight", c_.q_lora_rank);
      linear(a + "q_b_proj", heads * c_.qk_head_dim(), c_.q_lora_rank);
    } else {
      linear(a + "q_proj", heads * c_.qk_head_dim(), H);
    }
    linear(a + "kv_a_proj_with_mqa", c_.kv_a_rows(), H);
    norm(a + "kv_a_layernorm.weight", c_.kv_lora_rank);
    linear(a + "kv_b_proj", heads * c_.kv_b_rows_per_head(), c_.kv_lora_rank);
    linear(a + "o_proj", H, heads * c_.v_head_dim);
    if (!c_.is_moe_layer(index)) return mlp(p + "mlp.", c_.intermediate_size);
    bf16(p + "mlp.gate.weight", {E, H}, 0.0f, 1.0f / std::sqrt(static_cast<float>(H)));
    const std::string bias = p + "mlp.gate.e_score_correction_bias";
    tensors_.push_back({bias, DType::F32, {E}, [this, bias, E] { return gen_.f32_uniform(bias, E, 0.5f); }});
    for (int64_t e = 0; e < E; ++e) mlp(fmt::format("{}mlp.experts.{}.", p, e), c_.moe_intermediate_size);
    if (c_.n_shared_experts > 0)
      mlp(p + "mlp.shared_experts.", static_cast<int64_t>(c_.moe_intermediate_size) * c_.n_shared_experts);
  }

  void model() {
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    const float head_std = 2.0f / std::sqrt(static_cast<float>(H));
    bf16("model.embed_tokens.weight", {V, H}, 0.0f, 1.0f);
    bf16("lm_head.weight", {V, H}, 0.0f, head_std);
    norm("model.norm.weight", H);
    for (int i = 0; i < c_.num_layers; ++i) layer(i);
    if (c_.num_nextn_predict_layers == 0) return;
    // The MTP module, with the copies of the embedding and lm_head that DeepSeek-R1 stores in it.
    const std::string p = fmt::format("model.layers.{}.", c_.num_layers);
    norm(p + "enorm.weight", H);
    norm(p + "hnorm.weight", H);
    bf16(p + "eh_proj.weight", {H, 2 * H}, 0.0f, 1.0f / std::sqrt(static_cast<float>(2 * H)));
    layer(c_.num_layers);
    norm(p + "shared_head.norm.weight", H);
    tensors_.push_back({p + "embed_tokens.weight", DType::BF16, {V, H},
                        [this, n = V * H] { return gen_.bf16_normal("model.embed_tokens.weight", n, 0.0f, 1.0f); }});
    tensors_.push_back({p + "shared_head.head.weight", DType::BF16, {V, H}, [this, n = V * H, head_std] {
                          return gen_.bf16_normal("lm_head.weight", n, 0.0f, head_std);
                        }});
  }

 private:
  static int64_t count(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  struct Stash {
    std::mutex mutex;
    std::map<std::string, std::vector<uint8_t>> scales;
  };

  const Config& c_;
  const Generator& gen_;
  std::shared_ptr<Stash> stash_ = std::make_shared<Stash>();
  std::vector<TensorToWrite> tensors_;
};

void copy_tokenizer_files(const std::string& out_dir) {
  const std::string from = deepseek_tokenizer_dir();
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    const std::string path = from + "/" + name;
    MOESERVE_CHECK(!from.empty() && file_exists(path),
                   "DeepSeek-R1's {} not found in \"{}\": run scripts/setup.sh, or set MOESERVE_DEEPSEEK_TOKENIZER",
                   name, from);
    write_text_file(out_dir + "/" + name, read_text_file(path));
  }
}

}  // namespace

std::string deepseek_tokenizer_dir() {
  const char* env = std::getenv("MOESERVE_DEEPSEEK_TOKENIZER");
  return env != nullptr && *env != '\0' ? env : MOESERVE_DEEPSEEK_TOKENIZER_DIR_DEFAULT;
}

Config tiny_config(const TinyOptions& o) {
  Config c;
  const bool r1 = !o.shape.empty();
  if (r1) {
    apply_known_shape(o.shape, c);
  } else {
    c.hidden_size = 64;
    c.intermediate_size = 320;
    c.moe_intermediate_size = 96;
    c.num_heads = 4;
    c.q_lora_rank = 160;
    c.kv_lora_rank = 144;
    c.qk_nope_head_dim = 32;
    c.qk_rope_head_dim = 16;  // YaRN's correction range is [2, 6]: kept, ramped and interpolated frequencies
    c.v_head_dim = 40;
    c.n_routed_experts = 16;
    c.num_experts_per_tok = 4;
    c.n_group = 4;
    c.topk_group = 2;
  }
  c.num_layers = o.layers > 0 ? o.layers : (r1 ? 4 : 3);
  c.first_k_dense_replace = std::min(r1 ? 3 : 1, c.num_layers - 1);
  c.n_shared_experts = 1;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.vocab_size = o.vocab > 0 ? o.vocab : kRealVocabulary;
  c.rms_norm_eps = 1e-6;
  c.rope.yarn = true;
  c.rope.yarn_params.theta = 10000.0;
  c.rope.yarn_params.factor = 40.0;
  c.rope.yarn_params.original_max_position = 4096;
  c.rope.yarn_params.beta_fast = 32.0;
  c.rope.yarn_params.beta_slow = 1.0;
  c.rope.yarn_params.truncate = true;
  c.rope.mscale = 1.0;
  c.rope.mscale_all_dim = 1.0;
  c.max_position_embeddings = 163840;
  c.num_nextn_predict_layers = 1;
  c.fp8 = o.fp8;
  c.bos_token_id = 0;
  if (c.vocab_size > 1) c.eos_token_ids = {1};
  MOESERVE_CHECK(o.shards >= 1, "--shards must be at least 1");
  c.validate("make-tiny --family deepseek-v3 options");
  return c;
}

void make_tiny_checkpoint(const TinyOptions& options, const std::string& out_dir) {
  namespace fs = std::filesystem;
  const Config config = tiny_config(options);
  fs::create_directories(out_dir);
  write_text_file((fs::path(out_dir) / "config.json").string(), to_config_json(config).dump(2) + "\n");
  // DeepSeek-R1's generation_config.json (its usage advice: temperature 0.6, top_p 0.95).
  const nlohmann::json generation = {{"bos_token_id", config.bos_token_id},
                                     {"do_sample", true},
                                     {"eos_token_id", config.eos_token_ids.empty() ? nlohmann::json(nullptr)
                                                                                   : nlohmann::json(config.eos_token_ids[0])},
                                     {"temperature", 0.6},
                                     {"top_p", 0.95}};
  write_text_file((fs::path(out_dir) / "generation_config.json").string(), generation.dump(2) + "\n");
  if (config.vocab_size == kRealVocabulary) copy_tokenizer_files(out_dir);
  const Generator gen(options.seed, config);
  TensorPlan plan(config, gen);
  plan.model();
  write_checkpoint_tensors(out_dir, plan.take(), options.shards);
}

}  // namespace moeserve::deepseek_v3
