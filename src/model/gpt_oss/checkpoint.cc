#include "model/gpt_oss/checkpoint.h"

#include <filesystem>

#include "model/mxfp4.h"
#include "model/tensor_binder.h"
#include "util/bfloat16.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_fields.h"

namespace moeserve {

float Matrix::at(int64_t r, int64_t c) const {
  if (dtype == DType::BF16) return bf16_to_float(reinterpret_cast<const uint16_t*>(row(r))[c]);
  return reinterpret_cast<const float*>(row(r))[c];
}

float ExpertMatrix::weight(int64_t expert, int64_t row, int64_t col) const {
  if (format == ExpertFormat::dense) return dense.at(expert * in_features + col, row);
  int64_t blocks_per_row = in_features / kMxfp4BlockSize;
  int64_t block = (expert * out_features + row) * blocks_per_row + col / kMxfp4BlockSize;
  uint8_t byte = blocks[block * kMxfp4BlockBytes + (col % kMxfp4BlockSize) / 2];
  uint8_t nibble = col % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
  return kFp4Values[nibble] * e8m0_to_float(scales[block]);
}

namespace {

ExpertMatrix bind_mxfp4(TensorBinder& binder, const std::string& prefix, const std::string& bias_name,
                        int64_t experts, int64_t out, int64_t in, const char* blocks_suffix,
                        const char* scales_suffix) {
  ExpertMatrix m;
  m.format = ExpertFormat::mxfp4;
  m.num_experts = experts;
  m.out_features = out;
  m.in_features = in;
  m.blocks = binder.tensor(prefix + blocks_suffix, {experts, out, in / kMxfp4BlockSize, kMxfp4BlockBytes},
                           {DType::U8})
                 .bytes.data();
  m.scales = binder.tensor(prefix + scales_suffix, {experts, out, in / kMxfp4BlockSize}, {DType::U8}).bytes.data();
  const TensorView& bias = binder.tensor(bias_name, {experts, out}, {DType::BF16, DType::F32});
  m.bias = TensorBinder::to_floats(bias, 0, experts * out);
  return m;
}

ExpertMatrix bind_dense_experts(TensorBinder& binder, const std::string& name, const std::string& bias_name,
                                int64_t experts, int64_t out, int64_t in) {
  ExpertMatrix m;
  m.format = ExpertFormat::dense;
  m.num_experts = experts;
  m.out_features = out;
  m.in_features = in;
  const TensorView& view = binder.tensor(name, {experts, in, out}, {DType::BF16, DType::F32});
  m.dense = Matrix{view.dtype, view.bytes.data(), experts * in, out};
  const TensorView& bias = binder.tensor(bias_name, {experts, out}, {DType::BF16, DType::F32});
  m.bias = TensorBinder::to_floats(bias, 0, experts * out);
  return m;
}

void check_original_dtypes(const std::string& dir, const TensorStore& store) {
  std::string path = (std::filesystem::path(dir) / "dtypes.json").string();
  if (!file_exists(path)) return;
  auto dtypes = read_json_file(path);
  MOESERVE_CHECK(dtypes.is_object(), "{}: not a JSON object", path);
  for (auto& [name, declared] : dtypes.items()) {
    const TensorView* view = store.find(name);
    MOESERVE_CHECK(view != nullptr, "{}: names tensor {}, which no safetensors file holds", path, name);
    const std::string d = json_value_as<std::string>(declared, path, name);
    bool ok = (d == "FP4" || d == "UE8") ? view->dtype == DType::U8 : d == dtype_name(view->dtype);
    MOESERVE_CHECK(ok, "{}: declares {} as {}, but {}", path, name, d, view->describe());
  }
}

}  // namespace

Checkpoint::Checkpoint(ModelConfig config, TensorStore store) : config_(std::move(config)), store_(std::move(store)) {}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  ModelConfig config = load_model_config(dir);
  TensorStore store = TensorStore::open_directory(dir);
  if (config.layout == CheckpointLayout::original) check_original_dtypes(dir, store);
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint(std::move(config), std::move(store)));
  checkpoint->bind_weights();
  return checkpoint;
}

void Checkpoint::bind_weights() {
  const ModelConfig& c = config_;
  TensorBinder binder(store_);
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts, I = c.intermediate_size,
                V = c.vocab_size;
  const bool hf = c.layout == CheckpointLayout::huggingface;
  weights_.embedding = binder.matrix(hf ? "model.embed_tokens.weight" : "embedding.weight", V, H);
  weights_.unembedding = binder.matrix(hf ? "lm_head.weight" : "unembedding.weight", V, H);
  weights_.final_norm = binder.vector(hf ? "model.norm.weight" : "norm.scale", H);
  weights_.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = weights_.layers[i];
    if (hf) {
      std::string p = fmt::format("model.layers.{}.", i);
      l.attn_norm = binder.vector(p + "input_layernorm.weight", H);
      l.q = binder.matrix(p + "self_attn.q_proj.weight", Q, H);
      l.k = binder.matrix(p + "self_attn.k_proj.weight", KV, H);
      l.v = binder.matrix(p + "self_attn.v_proj.weight", KV, H);
      l.o = binder.matrix(p + "self_attn.o_proj.weight", H, Q);
      l.q_bias = binder.vector(p + "self_attn.q_proj.bias", Q);
      l.k_bias = binder.vector(p + "self_attn.k_proj.bias", KV);
      l.v_bias = binder.vector(p + "self_attn.v_proj.bias", KV);
      l.o_bias = binder.vector(p + "self_attn.o_proj.bias", H);
      l.sinks = binder.vector(p + "self_attn.sinks", c.num_heads);
      l.mlp_norm = binder.vector(p + "post_attention_layernorm.weight", H);
      l.router = binder.matrix(p + "mlp.router.weight", E, H);
      l.router_bias = binder.vector(p + "mlp.router.bias", E);
      std::string x = p + "mlp.experts.";
      if (binder.has(x + "gate_up_proj_blocks")) {
        l.mlp1 = bind_mxfp4(binder, x + "gate_up_proj", x + "gate_up_proj_bias", E, 2 * I, H, "_blocks", "_scales");
        l.mlp2 = bind_mxfp4(binder, x + "down_proj", x + "down_proj_bias", E, H, I, "_blocks", "_scales");
      } else {
        MOESERVE_CHECK(binder.has(x + "gate_up_proj"), "layer {}: neither {} (MXFP4) nor {} (dense) in {}", i,
                       x + "gate_up_proj_blocks", x + "gate_up_proj", store_.directory());
        l.mlp1 = bind_dense_experts(binder, x + "gate_up_proj", x + "gate_up_proj_bias", E, 2 * I, H);
        l.mlp2 = bind_dense_experts(binder, x + "down_proj", x + "down_proj_bias", E, H, I);
      }
    } else {
      std::string p = fmt::format("block.{}.", i);
      l.attn_norm = binder.vector(p + "attn.norm.scale", H);
      const TensorView& qkv = binder.tensor(p + "attn.qkv.weight", {Q + 2 * KV, H}, {DType::BF16, DType::F32});
      l.q = TensorBinder::matrix_rows(qkv, 0, Q);
      l.k = TensorBinder::matrix_rows(qkv, Q, KV);
      l.v = TensorBinder::matrix_rows(qkv, Q + KV, KV);
      const TensorView& qkv_bias = binder.tensor(p + "attn.qkv.bias", {Q + 2 * KV}, {DType::BF16, DType::F32});
      l.q_bias = TensorBinder::to_floats(qkv_bias, 0, Q);
      l.k_bias = TensorBinder::to_floats(qkv_bias, Q, KV);
      l.v_bias = TensorBinder::to_floats(qkv_bias, Q + KV, KV);
      l.o = binder.matrix(p + "attn.out.weight", H, Q);
      l.o_bias = binder.vector(p + "attn.out.bias", H);
      l.sinks = binder.vector(p + "attn.sinks", c.num_heads);
      l.mlp_norm = binder.vector(p + "mlp.norm.scale", H);
      l.router = binder.matrix(p + "mlp.gate.weight", E, H);
      l.router_bias = binder.vector(p + "mlp.gate.bias", E);
      l.mlp1 = bind_mxfp4(binder, p + "mlp.mlp1_weight", p + "mlp.mlp1_bias", E, 2 * I, H, ".blocks", ".scales");
      l.mlp2 = bind_mxfp4(binder, p + "mlp.mlp2_weight", p + "mlp.mlp2_bias", E, H, I, ".blocks", ".scales");
    }
  }
  binder.check_all_used("a GPT-OSS model");
}

}  // namespace moeserve
