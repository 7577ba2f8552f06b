#include "runner/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "model/mxfp4.h"
#include "runner/cuda/moe_layout.h"
#include "util/bfloat16.h"
#include "util/error.h"
#include "util/log.h"

namespace moeserve::cuda {
std::vector<uint8_t> dense_rows(const std::vector<const Matrix*>& parts, Precision dense) {
  int64_t rows = 0;
  for (const Matrix* m : parts) rows += m->rows;
  const int64_t cols = parts.front()->cols;
  std::vector<uint8_t> out(rows * cols * element_bytes(dense));
  int64_t row = 0;
  for (const Matrix* m : parts) {
    MOESERVE_CHECK(m->cols == cols, "fused matrix parts have {} and {} columns", m->cols, cols);
    for (int64_t r = 0; r < m->rows; ++r, ++row) {
      uint8_t* dst = out.data() + row * cols * element_bytes(dense);
      if (dense == Precision::bf16 && m->dtype == DType::BF16) {
        std::memcpy(dst, m->row(r), cols * 2);
        continue;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const float v = m->at(r, c);
        if (dense == Precision::bf16)
          reinterpret_cast<uint16_t*>(dst)[c] = float_to_bf16(v);
        else
          reinterpret_cast<float*>(dst)[c] = v;
      }
    }
  }
  return out;
}

namespace {

// Adds skew * ln(1 / (r + 1)) to the bias of the expert of rank r, ranks a random permutation of the experts.
void add_zipf_offsets(float* device_bias, int64_t E, double skew, uint64_t seed) {
  std::vector<float> bias(E);
  MOESERVE_CUDA_CHECK(cudaMemcpy(bias.data(), device_bias, E * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<int> rank(E);
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), std::mt19937_64(seed));
  for (int64_t e = 0; e < E; ++e) bias[e] -= static_cast<float>(skew * std::log(rank[e] + 1.0));
  MOESERVE_CUDA_CHECK(cudaMemcpy(device_bias, bias.data(), E * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<float> concat(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// The power of two make-tiny uses for MXFP4 magnitudes (model/gpt_oss/make_tiny.cc): outputs of standard deviation
// `target` for unit-RMS inputs of dimension fan_in (e2m1 values drawn uniformly have an RMS of about 2.93).
int mxfp4_exponent(int64_t fan_in, double target) {
  return static_cast<int>(std::lround(std::log2(target / (std::sqrt(static_cast<double>(fan_in)) * 2.93))));
}

}  // namespace

int DeviceWeights::add_row_scale_max(ExpertWeightsView& e, int64_t experts) {
  auto* row_max = static_cast<uint8_t*>(allocate(experts * e.out_features));
  DeviceBuffer wide(sizeof(int32_t));
  launch_mxfp4_row_scale_max(nullptr, e.scales, experts, e.out_features, static_cast<int>(e.in_features / kMxfp4BlockSize),
                             row_max, wide.as<int32_t>());
  e.row_scale_max = row_max;
  return to_host<int32_t>(wide.get(), 1)[0];
}

void* DeviceWeights::allocate(size_t n) {
  buffers_.emplace_back(n);
  bytes += n;
  return buffers_.back().get();
}

DeviceWeights DeviceWeights::upload(const Checkpoint& checkpoint, Precision dense) {
  return upload(checkpoint.config(), checkpoint.weights(), dense, checkpoint.directory());
}

DeviceWeights DeviceWeights::upload(const ModelConfig& c, const ModelWeights& w, Precision dense,
                                    const std::string& source, int first_expert, int local_experts) {
  MOESERVE_CHECK(!w.layers.empty() && w.layers.front().mlp1.format == ExpertFormat::mxfp4,
                 "{}: the CUDA runner needs MXFP4 experts (this checkpoint stores them dense)", source);
  DeviceWeights d;
  d.dense = dense;
  auto put = [&](const void* host, size_t n) {
    void* device = d.allocate(n);
    MOESERVE_CUDA_CHECK(cudaMemcpy(device, host, n, cudaMemcpyHostToDevice));
    return device;
  };
  auto put_floats = [&](const std::vector<float>& v) { return static_cast<const float*>(put(v.data(), v.size() * 4)); };
  auto put_dense = [&](std::vector<const Matrix*> parts) {
    std::vector<uint8_t> bytes = dense_rows(parts, dense);
    return put(bytes.data(), bytes.size());
  };
  DeviceBuffer max_scale(sizeof(int32_t));
  auto put_experts = [&](const ExpertMatrix& m, const std::string& name) {
    const int64_t count = local_experts > 0 ? local_experts : m.num_experts;
    MOESERVE_CHECK(first_expert >= 0 && first_expert + count <= m.num_experts &&
                       m.bias.size() == static_cast<size_t>(m.num_experts * m.out_features),
                   "{}: experts {}..{} of {} in {}", source, first_expert, first_expert + count - 1, m.num_experts, name);
    const int64_t per_expert = m.out_features * m.in_features / kMxfp4BlockSize;  // blocks of one expert
    const int64_t blocks = count * per_expert;
    ExpertWeightsView e;
    e.out_features = m.out_features;
    e.in_features = m.in_features;
    // The checkpoint's order up, then tiled (moe_layout.h) and each word packed: the kernels' order.
    const int blocks_per_row = static_cast<int>(m.in_features / kMxfp4BlockSize);
    const int64_t tiled = mxfp4_tiled_elements(count, m.out_features, blocks_per_row);
    auto* block_bytes = static_cast<uint8_t*>(d.allocate(tiled * kMxfp4BlockBytes));
    auto* scale_bytes = static_cast<uint8_t*>(d.allocate(tiled));
    {
      DeviceBuffer checkpoint_blocks(blocks * kMxfp4BlockBytes), checkpoint_scales(blocks);
      MOESERVE_CUDA_CHECK(cudaMemcpy(checkpoint_blocks.get(), m.blocks + first_expert * per_expert * kMxfp4BlockBytes,
                                     blocks * kMxfp4BlockBytes, cudaMemcpyHostToDevice));
      MOESERVE_CUDA_CHECK(cudaMemcpy(checkpoint_scales.get(), m.scales + first_expert * per_expert, blocks,
                                     cudaMemcpyHostToDevice));
      launch_mxfp4_tile(nullptr, block_bytes, scale_bytes, checkpoint_blocks.as<uint8_t>(),
                        checkpoint_scales.as<uint8_t>(), count, m.out_features, blocks_per_row);
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());  // before the buffers go
    }
    launch_mxfp4_pack(nullptr, block_bytes, tiled * kMxfp4BlockBytes);
    e.blocks = block_bytes;
    e.scales = scale_bytes;
    const auto bias_begin = m.bias.begin() + first_expert * m.out_features;
    e.bias = put_floats(std::vector<float>(bias_begin, bias_begin + count * m.out_features));
    launch_max_byte(nullptr, e.scales, tiled, max_scale.as<int32_t>());
    const int32_t largest = to_host<int32_t>(max_scale.get(), 1)[0];
    MOESERVE_CHECK(largest <= 128, "{}: {} has an MXFP4 scale of 2^{}; the CUDA dequantiser handles up to 2^1",
                   source, name, largest - 127);
    const int wide = d.add_row_scale_max(e, count);
    if (wide > 0)
      log_info("{}: {} of {} rows of {} have MXFP4 scales spanning more than 2^{}: the FP8 grouped GEMM rounds their "
               "smallest blocks (--activation-dtype fp8 only)", source, wide, count * m.out_features, name,
               kMxfp4E4m3ExactSpan);
    return e;
  };

  d.embedding = put_dense({&w.embedding});
  d.unembedding = put_dense({&w.unembedding});
  d.final_norm = put_floats(w.final_norm);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    DeviceLayer layer;
    layer.attn_norm = put_floats(l.attn_norm);
    layer.qkv = put_dense({&l.q, &l.k, &l.v});
    layer.qkv_bias = put_floats(concat({&l.q_bias, &l.k_bias, &l.v_bias}));
    layer.sinks = put_floats(l.sinks);
    layer.o = put_dense({&l.o});
    layer.o_bias = put_floats(l.o_bias);
    layer.mlp_norm = put_floats(l.mlp_norm);
    layer.router = put_dense({&l.router});
    layer.router_bias = put_floats(l.router_bias);
    layer.mlp1 = put_experts(l.mlp1, "layer " + std::to_string(i) + " mlp1");
    layer.mlp2 = put_experts(l.mlp2, "layer " + std::to_string(i) + " mlp2");
    d.layers.push_back(layer);
    // A 120b checkpoint takes minutes to upload: a line at each quarter shows it moving.
    const size_t n = w.layers.size();
    if ((i + 1) * 4 / n != i * 4 / n) log_info("weights on the GPU: {} of {} layers", i + 1, n);
  }
  MOESERVE_CHECK(static_cast<int>(d.layers.size()) == c.num_layers, "{}: {} layers bound for {} in config.json",
                 source, d.layers.size(), c.num_layers);
  return d;
}

DeviceWeights DeviceWeights::synthetic(const ModelConfig& c, uint64_t seed, Precision dense, double router_skew,
                                       int local_experts, IndexRange vocab) {
  const int64_t held = local_experts > 0 ? local_experts : c.num_experts;  // experts whose weights are made
  DeviceWeights d;
  d.dense = dense;
  uint64_t next_key = seed * 0x100000001b3ull + 1;
  // Gains as make-tiny's (model/gpt_oss/make_tiny.cc), so activations stay O(1) and the SwiGLU clamp is reached.
  const float in_gain = 1.0f / std::sqrt(static_cast<float>(c.hidden_size));
  auto fill = [&](Precision type, int64_t n, float mean, float std) {
    void* p = d.allocate(n * element_bytes(type));
    launch_fill_uniform(nullptr, type, p, n, next_key++, mean, std);
    return p;
  };
  auto vector = [&](int64_t n, float mean, float std) { return static_cast<const float*>(fill(Precision::f32, n, mean, std)); };
  auto experts = [&](int64_t out, int64_t in, int exponent) {
    const int64_t blocks = mxfp4_tiled_elements(held, out, static_cast<int>(in / kMxfp4BlockSize));  // pads too
    ExpertWeightsView e;
    e.out_features = out;
    e.in_features = in;
    auto* block_bytes = static_cast<uint8_t*>(d.allocate(blocks * kMxfp4BlockBytes));
    auto* scale_bytes = static_cast<uint8_t*>(d.allocate(blocks));
    // Random bits: the kernels read them as packed words (moe_layout.h), which is the same distribution.
    launch_fill_bytes(nullptr, block_bytes, blocks * kMxfp4BlockBytes, next_key++);
    launch_fill_scales(nullptr, scale_bytes, blocks, next_key++, exponent);
    e.blocks = block_bytes;
    e.scales = scale_bytes;
    e.bias = vector(held * out, 0.0f, 0.5f);
    d.add_row_scale_max(e, held);  // synthetic scales span 2: never wide
    return e;
  };
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts, I = c.intermediate_size;
  d.embedding = fill(dense, int64_t{c.vocab_size} * H, 0.0f, 1.0f);
  if (vocab.size() == 0 || vocab.size() == c.vocab_size) {
    d.unembedding = fill(dense, int64_t{c.vocab_size} * H, 0.0f, 2.0f * in_gain);
  } else {  // the slice of the whole matrix every rank draws from the same key, made whole for a moment
    MOESERVE_CHECK(vocab.begin >= 0 && vocab.end <= c.vocab_size, "unembedding rows [{}, {}) of {}", vocab.begin,
                   vocab.end, c.vocab_size);
    const size_t row_bytes = H * element_bytes(dense);
    DeviceBuffer whole(c.vocab_size * row_bytes);
    launch_fill_uniform(nullptr, dense, whole.get(), int64_t{c.vocab_size} * H, next_key++, 0.0f, 2.0f * in_gain);
    void* rows = d.allocate(vocab.size() * row_bytes);
    MOESERVE_CUDA_CHECK(cudaMemcpy(rows, whole.as<uint8_t>() + vocab.begin * row_bytes, vocab.size() * row_bytes,
                                   cudaMemcpyDeviceToDevice));
    d.unembedding = rows;
  }
  d.final_norm = vector(H, 1.0f, 0.1f);
  for (int i = 0; i < c.num_layers; ++i) {
    DeviceLayer l;
    l.attn_norm = vector(H, 1.0f, 0.1f);
    l.qkv = fill(dense, (Q + 2 * KV) * H, 0.0f, in_gain);
    l.qkv_bias = vector(Q + 2 * KV, 0.0f, 0.2f);
    l.sinks = vector(c.num_heads, 0.0f, 1.0f);
    l.o = fill(dense, H * Q, 0.0f, 1.0f / std::sqrt(static_cast<float>(Q)));
    l.o_bias = vector(H, 0.0f, 0.2f);
    l.mlp_norm = vector(H, 1.0f, 0.1f);
    l.router = fill(dense, E * H, 0.0f, in_gain);
    l.router_bias = vector(E, 0.0f, 0.5f);
    if (router_skew > 0) add_zipf_offsets(const_cast<float*>(l.router_bias), E, router_skew, seed * 1000 + i);
    l.mlp1 = experts(2 * I, H, mxfp4_exponent(H, 5.0));
    l.mlp2 = experts(H, I, mxfp4_exponent(I, 0.2));
    d.layers.push_back(l);
  }
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

}  // namespace moeserve::cuda
