#include "runner/cuda/deepseek_device_weights.h"

#include <cmath>
#include <cstring>

#include "runner/cuda/device_weights.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

// The model's tensors by role, in the order build() asks for them.
enum class Role {
  embedding, lm_head, final_norm,
  input_norm, post_attention_norm,
  q, q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b, o,
  mlp_gate, mlp_up, mlp_down,
  router, router_bias, experts_gate, experts_up, experts_down,
  shared_gate, shared_up, shared_down,
  mtp_enorm, mtp_hnorm, mtp_eh_proj, mtp_head_norm, mtp_embedding, mtp_head
};

size_t value_bytes(WeightType type) { return type == WeightType::fp8_block ? 1 : type == WeightType::bf16 ? 2 : 4; }

}  // namespace

class DeepseekDeviceWeights::Source {
 public:
  explicit Source(Precision precision) : precision_(precision) {}
  virtual ~Source() = default;
  virtual void start_layer(int /*layer*/) {}
  // A projection's weight, count stacked matrices of [rows, cols] (the routed experts; 1 otherwise).
  virtual DeviceMatrix projection(Role role, int64_t rows, int64_t cols, int count) = 0;
  // A matrix held in the precision's type (embedding, lm_head, router gate).
  virtual DeviceMatrix dense(Role role, int64_t rows, int64_t cols) = 0;
  virtual const float* vector(Role role, int64_t n) = 0;

  std::vector<DeviceBuffer> take_buffers() { return std::move(buffers_); }

 protected:
  void* allocate(size_t bytes) {
    buffers_.emplace_back(bytes);
    return buffers_.back().get();
  }
  DeviceMatrix allocate_matrix(WeightType type, int64_t rows, int64_t cols, int count) {
    DeviceMatrix m{type, nullptr, nullptr, rows, cols, count};
    m.values = allocate(static_cast<size_t>(count) * rows * cols * value_bytes(type));
    if (type == WeightType::fp8_block)
      m.scales = static_cast<float*>(allocate(static_cast<size_t>(count) * m.scales_per_matrix() * sizeof(float)));
    return m;
  }
  float* allocate_floats(int64_t n) { return static_cast<float*>(allocate(static_cast<size_t>(n) * sizeof(float))); }

  Precision precision_;

 private:
  std::vector<DeviceBuffer> buffers_;
};

namespace {

using Source = DeepseekDeviceWeights::Source;

class UploadSource final : public Source {
 public:
  UploadSource(const deepseek_v3::Checkpoint& checkpoint, Precision precision)
      : Source(precision), weights_(checkpoint.weights()), directory_(checkpoint.directory()) {}

  void start_layer(int layer) override {
    // The MTP module's layer follows the main model's (model.layers.<num_layers>).
    layer_ = layer < static_cast<int>(weights_.layers.size()) ? &weights_.layers.at(layer) : &mtp().layer;
    index_ = layer;
  }

  DeviceMatrix projection(Role role, int64_t rows, int64_t cols, int count) override {
    const std::vector<const deepseek_v3::Linear*> parts = linears(role);
    MOESERVE_CHECK(static_cast<int>(parts.size()) == count, "{}: layer {} has {} matrices for a projection of {}",
                   directory_, index_, parts.size(), count);
    const bool fp8 = parts.front()->is_fp8;
    const DeviceMatrix m = allocate_matrix(fp8 ? WeightType::fp8_block : weight_type_of(precision_), rows, cols, count);
    for (int e = 0; e < count; ++e) {
      const deepseek_v3::Linear& w = *parts[e];
      MOESERVE_CHECK(w.rows() == rows && w.cols() == cols && w.is_fp8 == fp8,
                     "{}: layer {} projection {} of [{}, {}] ({}) where [{}, {}] ({}) was expected", directory_, index_,
                     e, w.rows(), w.cols(), w.is_fp8 ? "FP8" : "dense", rows, cols, fp8 ? "FP8" : "dense");
      auto* values = static_cast<uint8_t*>(const_cast<void*>(m.values)) + e * m.values_per_matrix() * value_bytes(m.type);
      if (fp8) {
        MOESERVE_CUDA_CHECK(cudaMemcpy(values, w.fp8.data, m.values_per_matrix(), cudaMemcpyHostToDevice));
        const std::vector<float> scales = fp8_weight_scales_for_cublaslt(w.fp8);
        MOESERVE_CUDA_CHECK(cudaMemcpy(const_cast<float*>(m.scales) + e * m.scales_per_matrix(), scales.data(),
                                       scales.size() * sizeof(float), cudaMemcpyHostToDevice));
      } else {
        const std::vector<uint8_t> bytes = dense_rows({&w.dense}, precision_);
        MOESERVE_CUDA_CHECK(cudaMemcpy(values, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      }
    }
    return m;
  }

  DeviceMatrix dense(Role role, int64_t rows, int64_t cols) override {
    const Matrix& w = role == Role::embedding       ? weights_.embedding
                      : role == Role::lm_head       ? weights_.lm_head
                      : role == Role::mtp_embedding ? mtp().embedding
                      : role == Role::mtp_head      ? mtp().head
                                                    : layer_->router;
    MOESERVE_CHECK(w.rows == rows && w.cols == cols, "{}: a [{}, {}] matrix where [{}, {}] was expected", directory_,
                   w.rows, w.cols, rows, cols);
    const DeviceMatrix m = allocate_matrix(weight_type_of(precision_), rows, cols, 1);
    const std::vector<uint8_t> bytes = dense_rows({&w}, precision_);
    MOESERVE_CUDA_CHECK(cudaMemcpy(const_cast<void*>(m.values), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    return m;
  }

  const float* vector(Role role, int64_t n) override {
    const std::vector<float>& v = role == Role::final_norm            ? weights_.final_norm
                                  : role == Role::mtp_enorm           ? mtp().enorm
                                  : role == Role::mtp_hnorm           ? mtp().hnorm
                                  : role == Role::mtp_head_norm       ? mtp().head_norm
                                  : role == Role::input_norm          ? layer_->input_norm
                                  : role == Role::post_attention_norm ? layer_->post_attention_norm
                                  : role == Role::q_a_norm            ? layer_->attention.q_a_norm
                                  : role == Role::kv_a_norm           ? layer_->attention.kv_a_norm
                                                                      : layer_->router_bias;
    MOESERVE_CHECK(static_cast<int64_t>(v.size()) == n, "{}: a vector of {} where {} was expected", directory_, v.size(),
                   n);
    float* out = allocate_floats(n);
    MOESERVE_CUDA_CHECK(cudaMemcpy(out, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    return out;
  }

 private:
  std::vector<const deepseek_v3::Linear*> linears(Role role) const {
    const deepseek_v3::Attention& a = layer_->attention;
    switch (role) {
      case Role::q: return {&a.q};
      case Role::q_a: return {&a.q_a};
      case Role::q_b: return {&a.q_b};
      case Role::kv_a: return {&a.kv_a};
      case Role::kv_b: return {&a.kv_b};
      case Role::o: return {&a.o};
      case Role::mlp_gate: return {&layer_->dense.gate};
      case Role::mlp_up: return {&layer_->dense.up};
      case Role::mlp_down: return {&layer_->dense.down};
      case Role::shared_gate: return {&layer_->shared->gate};
      case Role::shared_up: return {&layer_->shared->up};
      case Role::shared_down: return {&layer_->shared->down};
      case Role::mtp_eh_proj: return {&mtp().eh_proj};
      default: break;
    }
    std::vector<const deepseek_v3::Linear*> experts;
    for (const deepseek_v3::Mlp& e : layer_->experts)
      experts.push_back(role == Role::experts_gate ? &e.gate : role == Role::experts_up ? &e.up : &e.down);
    return experts;
  }

  const deepseek_v3::Mtp& mtp() const {
    MOESERVE_CHECK(weights_.mtp.has_value(), "{}: no MTP layer (model.layers.{}.*)", directory_,
                   weights_.layers.size());
    return *weights_.mtp;
  }

  const deepseek_v3::Weights& weights_;
  std::string directory_;
  const deepseek_v3::Layer* layer_ = nullptr;
  int index_ = -1;
};

class SyntheticSource final : public Source {
 public:
  SyntheticSource(uint64_t seed, Precision precision) : Source(precision), seed_(seed) {}

  DeviceMatrix projection(Role, int64_t rows, int64_t cols, int count) override {
    const DeviceMatrix m = allocate_matrix(WeightType::fp8_block, rows, cols, count);
    launch_fill_e4m3(nullptr, static_cast<uint8_t*>(const_cast<void*>(m.values)), count * m.values_per_matrix(),
                     next_key());
    const std::vector<float> scales(static_cast<size_t>(count) * m.scales_per_matrix(),
                                    1.0f / (kSyntheticE4m3Rms * std::sqrt(static_cast<float>(cols))));
    MOESERVE_CUDA_CHECK(cudaMemcpy(const_cast<float*>(m.scales), scales.data(), scales.size() * sizeof(float),
                                   cudaMemcpyHostToDevice));
    return m;
  }

  DeviceMatrix dense(Role role, int64_t rows, int64_t cols) override {
    const DeviceMatrix m = allocate_matrix(weight_type_of(precision_), rows, cols, 1);
    const float inv_sqrt = 1.0f / std::sqrt(static_cast<float>(cols));
    const float std = role == Role::embedding ? 1.0f : role == Role::lm_head ? 2.0f * inv_sqrt : inv_sqrt;
    launch_fill_uniform(nullptr, precision_, const_cast<void*>(m.values), rows * cols, next_key(), 0.0f, std);
    return m;
  }

  const float* vector(Role role, int64_t n) override {
    float* out = allocate_floats(n);
    // Router biases U[0, 0.5) as make-tiny's (mean 0.25, std 0.5 / sqrt(12)); norm scales 1 + U(+-0.17).
    if (role == Role::router_bias)
      launch_fill_uniform(nullptr, Precision::f32, out, n, next_key(), 0.25f, 0.1443f);
    else
      launch_fill_uniform(nullptr, Precision::f32, out, n, next_key(), 1.0f, 0.1f);
    return out;
  }

 private:
  // Each tensor's own key: its place in build()'s order, under the seed.
  uint64_t next_key() { return seed_ * 0x9e3779b97f4a7c15ull + ++tensors_; }

  uint64_t seed_;
  uint64_t tensors_ = 0;
};

// Decoder layer `index` of the model (index num_layers: the MTP module's).
DeepseekDeviceLayer build_layer(const deepseek_v3::Config& c, int index, Source& source) {
  const int64_t H = c.hidden_size, L = c.kv_lora_rank, heads = c.num_heads, E = c.n_routed_experts;
  source.start_layer(index);
  DeepseekDeviceLayer l;
  l.input_norm = source.vector(Role::input_norm, H);
  l.post_attention_norm = source.vector(Role::post_attention_norm, H);
  const int64_t q_rows = heads * c.qk_head_dim();
  if (c.q_lora_rank > 0) {
    l.q_a = source.projection(Role::q_a, c.q_lora_rank, H, 1);
    l.q_a_norm = source.vector(Role::q_a_norm, c.q_lora_rank);
    l.q_b = source.projection(Role::q_b, q_rows, c.q_lora_rank, 1);
  } else {
    l.q = source.projection(Role::q, q_rows, H, 1);
  }
  l.kv_a = source.projection(Role::kv_a, c.kv_a_rows(), H, 1);
  l.kv_a_norm = source.vector(Role::kv_a_norm, L);
  l.kv_b = source.projection(Role::kv_b, heads * c.kv_b_rows_per_head(), L, 1);
  l.o = source.projection(Role::o, H, heads * c.v_head_dim, 1);
  l.moe = c.is_moe_layer(index);
  if (!l.moe) {
    l.gate = source.projection(Role::mlp_gate, c.intermediate_size, H, 1);
    l.up = source.projection(Role::mlp_up, c.intermediate_size, H, 1);
    l.down = source.projection(Role::mlp_down, H, c.intermediate_size, 1);
    return l;
  }
  const int64_t I = c.moe_intermediate_size;
  l.router = source.dense(Role::router, E, H);
  l.router_bias = source.vector(Role::router_bias, E);
  l.gate = source.projection(Role::experts_gate, I, H, static_cast<int>(E));
  l.up = source.projection(Role::experts_up, I, H, static_cast<int>(E));
  l.down = source.projection(Role::experts_down, H, I, static_cast<int>(E));
  l.has_shared = c.n_shared_experts > 0;
  if (l.has_shared) {
    const int64_t shared = I * c.n_shared_experts;
    l.shared_gate = source.projection(Role::shared_gate, shared, H, 1);
    l.shared_up = source.projection(Role::shared_up, shared, H, 1);
    l.shared_down = source.projection(Role::shared_down, H, shared, 1);
  }
  return l;
}

// Whether two checkpoint matrices hold the same values: the same tensor, or an equal copy.
bool same_values(const Matrix& a, const Matrix& b) {
  if (a.dtype != b.dtype || a.rows != b.rows || a.cols != b.cols) return false;
  const size_t bytes = static_cast<size_t>(a.rows * a.cols) * dtype_size(a.dtype);
  return a.data == b.data || std::memcmp(a.data, b.data, bytes) == 0;
}

}  // namespace

DeepseekDeviceWeights DeepseekDeviceWeights::build(const deepseek_v3::Config& c, Precision precision, Source& source) {
  DeepseekDeviceWeights w;
  w.precision = precision;
  const int64_t H = c.hidden_size;
  w.embedding = source.dense(Role::embedding, c.vocab_size, H);
  w.lm_head = source.dense(Role::lm_head, c.vocab_size, H);
  w.final_norm = source.vector(Role::final_norm, H);
  for (int index = 0; index < c.num_layers; ++index) w.layers.push_back(build_layer(c, index, source));
  w.buffers_ = source.take_buffers();
  for (const DeviceBuffer& b : w.buffers_) w.bytes += b.bytes();
  return w;
}

DeepseekDeviceWeights DeepseekDeviceWeights::upload(const deepseek_v3::Checkpoint& checkpoint, Precision precision) {
  UploadSource source(checkpoint, precision);
  return build(checkpoint.config(), precision, source);
}

DeepseekDeviceWeights DeepseekDeviceWeights::synthetic(const deepseek_v3::Config& config, uint64_t seed,
                                                       Precision precision) {
  SyntheticSource source(seed, precision);
  DeepseekDeviceWeights w = build(config, precision, source);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());  // the fills ran on the legacy stream
  return w;
}

DeepseekDeviceMtp DeepseekDeviceMtp::upload(const deepseek_v3::Checkpoint& checkpoint,
                                            const DeepseekDeviceWeights& main) {
  const deepseek_v3::Config& c = checkpoint.config();
  MOESERVE_CHECK(checkpoint.has_mtp(), "{}: no MTP layer (model.layers.{}.*) to draft with", checkpoint.directory(),
                 c.num_layers);
  const deepseek_v3::Weights& weights = checkpoint.weights();
  const int64_t H = c.hidden_size;
  UploadSource source(checkpoint, main.precision);
  DeepseekDeviceMtp m;
  m.layer = build_layer(c, c.num_layers, source);
  m.enorm = source.vector(Role::mtp_enorm, H);
  m.hnorm = source.vector(Role::mtp_hnorm, H);
  m.eh_proj = source.projection(Role::mtp_eh_proj, H, 2 * H, 1);
  m.head_norm = source.vector(Role::mtp_head_norm, H);
  m.embedding = same_values(weights.mtp->embedding, weights.embedding)
                    ? main.embedding
                    : source.dense(Role::mtp_embedding, c.vocab_size, H);
  m.head = same_values(weights.mtp->head, weights.lm_head) ? main.lm_head
                                                           : source.dense(Role::mtp_head, c.vocab_size, H);
  m.buffers_ = source.take_buffers();
  for (const DeviceBuffer& b : m.buffers_) m.bytes += b.bytes();
  return m;
}

}  // namespace moeserve::cuda
