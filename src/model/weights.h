// Views of a loaded checkpoint's tensors, by role. Nothing is copied: matrices and expert blocks point into
// the mapped safetensors files (bf16 or f32 as stored; MXFP4 kept packed). Only small vectors (norm scales,
// biases, sinks) are converted to float at load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace moeserve {

// A row-major [rows, cols] matrix in BF16 or F32.
struct Matrix {
  DType dtype = DType::BF16;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  const uint8_t* row(int64_t r) const { return data + r * cols * static_cast<int64_t>(dtype_size(dtype)); }
  float at(int64_t r, int64_t c) const;
};

enum class ExpertFormat { mxfp4, dense };

// One expert projection for all experts: out = W_e x + b_e.
struct ExpertMatrix {
  ExpertFormat format = ExpertFormat::mxfp4;
  int64_t num_experts = 0;
  int64_t out_features = 0;  // rows
  int64_t in_features = 0;   // K, the reduction dimension
  // mxfp4: blocks [E, out, in/32, 16] and scales [E, out, in/32].
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  // dense (Hugging Face's dequantised layout, used as x @ W): [E, in, out] in BF16 or F32.
  Matrix dense;  // rows = E * in, cols = out
  std::vector<float> bias;  // [E, out]

  // Element (expert, output row, input column) as a float: the single definition every runner is tested against.
  float weight(int64_t expert, int64_t row, int64_t col) const;
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  Matrix q, k, v, o;             // q [q_dim, hidden], k/v [kv_dim, hidden], o [hidden, q_dim]
  std::vector<float> q_bias, k_bias, v_bias, o_bias;
  std::vector<float> sinks;      // [num_heads]
  std::vector<float> mlp_norm;   // [hidden]
  Matrix router;                 // [num_experts, hidden]
  std::vector<float> router_bias;
  ExpertMatrix mlp1;  // [E, 2 * intermediate, hidden], rows interleaved gate (even) / up (odd)
  ExpertMatrix mlp2;  // [E, hidden, intermediate]
};

struct ModelWeights {
  Matrix embedding;    // [vocab, hidden]
  Matrix unembedding;  // [vocab, hidden]
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
};

}  // namespace moeserve
