#include "model/deepseek_v3/checkpoint.h"

#include <fmt/ranges.h>

#include "model/tensor_binder.h"
#include "util/error.h"

namespace moeserve::deepseek_v3 {
namespace {

class LayerBinder {
 public:
  LayerBinder(const Config& config, const TensorStore& store, TensorBinder& binder)
      : c_(config), store_(store), binder_(binder) {}

  // `name`.weight [rows, cols]: FP8 e4m3 with `name`.weight_scale_inv, or bf16/f32.
  Linear linear(const std::string& name, int64_t rows, int64_t cols) {
    const std::string weight = name + ".weight";
    const std::string scale = name + ".weight_scale_inv";
    const TensorView& view = binder_.tensor(weight, {rows, cols}, {DType::F8_E4M3, DType::BF16, DType::F32});
    Linear l;
    if (view.dtype != DType::F8_E4M3) {
      MOESERVE_CHECK(!binder_.has(scale), "{}: block scales for a {} weight (only FP8 weights have them)",
                     store_.get(scale).describe(), dtype_name(view.dtype));
      l.dense = Matrix{view.dtype, view.bytes.data(), rows, cols};
      return l;
    }
    MOESERVE_CHECK(c_.fp8, "{}: an FP8 weight, but config.json has no fp8 quantization_config", view.describe());
    MOESERVE_CHECK(binder_.has(scale), "{}: FP8 weight without its block scales {} (in {})", view.describe(), scale,
                   store_.directory());
    l.is_fp8 = true;
    Fp8BlockMatrix& m = l.fp8;
    m.data = view.bytes.data();
    m.rows = rows;
    m.cols = cols;
    m.block_rows = c_.fp8_block_rows;
    m.block_cols = c_.fp8_block_cols;
    const TensorView& s = store_.get(scale);
    const std::vector<int64_t> expected = {m.scale_rows(), m.scale_cols()};
    MOESERVE_CHECK(s.shape == expected,
                   "{}: scales of the wrong block shape: a [{}, {}] weight in blocks of [{}, {}] (weight_block_size) "
                   "needs [{}]",
                   s.describe(), rows, cols, m.block_rows, m.block_cols, fmt::join(expected, ", "));
    const TensorView& bound = binder_.tensor(scale, expected, {DType::F32, DType::BF16});
    m.scales = TensorBinder::to_floats(bound, 0, m.scale_rows() * m.scale_cols());
    return l;
  }

  Mlp mlp(const std::string& prefix, int64_t intermediate) {
    const int64_t H = c_.hidden_size;
    return Mlp{linear(prefix + "gate_proj", intermediate, H), linear(prefix + "up_proj", intermediate, H),
               linear(prefix + "down_proj", H, intermediate)};
  }

  Attention attention(const std::string& prefix) {
    const int64_t H = c_.hidden_size, heads = c_.num_heads;
    Attention a;
    if (c_.q_lora_rank > 0) {
      a.q_a = linear(prefix + "q_a_proj", c_.q_lora_rank, H);
      a.q_a_norm = binder_.vector(prefix + "q_a_layernorm.weight", c_.q_lora_rank);
      a.q_b = linear(prefix + "q_b_proj", heads * c_.qk_head_dim(), c_.q_lora_rank);
    } else {
      a.q = linear(prefix + "q_proj", heads * c_.qk_head_dim(), H);
    }
    a.kv_a = linear(prefix + "kv_a_proj_with_mqa", c_.kv_a_rows(), H);
    a.kv_a_norm = binder_.vector(prefix + "kv_a_layernorm.weight", c_.kv_lora_rank);
    a.kv_b = linear(prefix + "kv_b_proj", heads * c_.kv_b_rows_per_head(), c_.kv_lora_rank);
    a.o = linear(prefix + "o_proj", H, heads * c_.v_head_dim);
    return a;
  }

  Layer layer(int index) {
    const std::string p = fmt::format("model.layers.{}.", index);
    const int64_t H = c_.hidden_size, E = c_.n_routed_experts;
    Layer l;
    l.input_norm = binder_.vector(p + "input_layernorm.weight", H);
    l.post_attention_norm = binder_.vector(p + "post_attention_layernorm.weight", H);
    l.attention = attention(p + "self_attn.");
    l.moe = c_.is_moe_layer(index);
    if (!l.moe) {
      l.dense = mlp(p + "mlp.", c_.intermediate_size);
      return l;
    }
    l.router = binder_.matrix(p + "mlp.gate.weight", E, H);
    l.router_bias = binder_.vector(p + "mlp.gate.e_score_correction_bias", E);
    for (int64_t e = 0; e < E; ++e) l.experts.push_back(mlp(fmt::format("{}mlp.experts.{}.", p, e), c_.moe_intermediate_size));
    if (c_.n_shared_experts > 0)
      l.shared = mlp(p + "mlp.shared_experts.", static_cast<int64_t>(c_.moe_intermediate_size) * c_.n_shared_experts);
    return l;
  }

  // The MTP module when the checkpoint has any tensor of its layer (HF and DeepSeek's converter drop it; a
  // checkpoint without it still serves, without MTP drafting).
  std::optional<Mtp> mtp(const Weights& main) {
    if (c_.num_nextn_predict_layers == 0) return std::nullopt;
    const std::string p = fmt::format("model.layers.{}.", c_.num_layers);
    bool present = false;
    for (const auto& name : store_.names()) present = present || name.rfind(p, 0) == 0;
    if (!present) return std::nullopt;
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    Mtp m;
    m.enorm = binder_.vector(p + "enorm.weight", H);
    m.hnorm = binder_.vector(p + "hnorm.weight", H);
    m.eh_proj = linear(p + "eh_proj", H, 2 * H);
    m.layer = layer(c_.num_layers);
    m.head_norm = binder_.vector(p + "shared_head.norm.weight", H);
    m.embedding = binder_.has(p + "embed_tokens.weight") ? binder_.matrix(p + "embed_tokens.weight", V, H) : main.embedding;
    m.head = binder_.has(p + "shared_head.head.weight") ? binder_.matrix(p + "shared_head.head.weight", V, H) : main.lm_head;
    return m;
  }

 private:
  const Config& c_;
  const TensorStore& store_;
  TensorBinder& binder_;
};

}  // namespace

nlohmann::json Checkpoint::weight_formats() const {
  const Linear& projection = weights_.layers.front().attention.kv_a;
  const std::string projections =
      projection.is_fp8 ? fmt::format("FP8 e4m3 with {} x {} block scales", config_.fp8_block_rows, config_.fp8_block_cols)
                        : dtype_name(projection.dense.dtype);
  return {{"projections", projections},
          {"embedding", dtype_name(weights_.embedding.dtype)},
          {"lm_head", dtype_name(weights_.lm_head.dtype)},
          {"mtp", has_mtp() ? "present" : "absent"},
          {"norms_router_bias", "f32 (converted at load)"}};
}

Checkpoint::Checkpoint(Config config, TensorStore store) : config_(std::move(config)), store_(std::move(store)) {}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  Config config = load_config(dir);
  TensorStore store = TensorStore::open_directory(dir);
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint(std::move(config), std::move(store)));
  checkpoint->bind_weights();
  return checkpoint;
}

void Checkpoint::bind_weights() {
  const Config& c = config_;
  TensorBinder binder(store_);
  LayerBinder layers(c, store_, binder);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  weights_.embedding = binder.matrix("model.embed_tokens.weight", V, H);
  weights_.lm_head = binder.matrix("lm_head.weight", V, H);
  weights_.final_norm = binder.vector("model.norm.weight", H);
  for (int i = 0; i < c.num_layers; ++i) weights_.layers.push_back(layers.layer(i));
  weights_.mtp = layers.mtp(weights_);
  binder.check_all_used("a DeepSeek-V3 model");
}

}  // namespace moeserve::deepseek_v3
