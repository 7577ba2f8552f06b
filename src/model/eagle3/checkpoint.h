// An EAGLE-3 draft head directory, opened: its config and its tensors bound by role with every shape checked
// against the config and the target (the layout NVIDIA Model-Optimizer's hf_spec_export.py writes, as in
// nvidia/gpt-oss-120b-Eagle3). Both exporter namings are read: ModelOpt 2025's midlayer.* and 2026's layers.0.*.
// SpecForge's t2d mask is checked against d2t and otherwise ignored, as vLLM and SGLang do. Weights stay in the
// mapping (bf16 or f32); only norm scales become floats.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/eagle3/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace moeserve::speculative {

struct Eagle3Weights {
  Matrix fc;                        // [hidden, feature_width]: fuses the captured target features
  std::vector<float> input_norm;    // [feature_width], norm_before_fc only
  std::vector<float> hidden_norm;   // [hidden], on the fused feature
  std::vector<float> input_layernorm;  // [hidden], on the token embedding
  std::vector<float> post_attention_layernorm;
  Matrix q, k, v;                   // [q_dim or kv_dim, 2 * hidden]: attention reads (embedding, feature)
  Matrix o;                         // [hidden, q_dim]
  Matrix gate, up;                  // [intermediate, hidden]
  Matrix down;                      // [hidden, intermediate]
  std::vector<float> final_norm;    // [hidden]
  std::optional<Matrix> lm_head;    // [draft_vocab, hidden]; absent: the target's unembedding
  std::optional<Matrix> embed_tokens;  // [vocab, hidden]; absent: the target's embedding
  std::vector<int64_t> d2t;         // [draft_vocab] offsets, target id = draft id + d2t[draft id]; empty: identity
};

class Eagle3Checkpoint {
 public:
  // Opens DIR (config.json and model.safetensors or a sharded set) for a target with this config; fails naming
  // the file and tensor for anything missing, ill-shaped or left over.
  static std::unique_ptr<Eagle3Checkpoint> open(const std::string& dir, const ModelConfig& target);

  const Eagle3Config& config() const { return config_; }
  const Eagle3Weights& weights() const { return weights_; }
  const std::string& directory() const { return store_.directory(); }
  // "midlayer." or "layers.0.": how the file names the decoder layer.
  const std::string& layer_prefix() const { return layer_prefix_; }

 private:
  Eagle3Checkpoint(Eagle3Config config, TensorStore store) : config_(std::move(config)), store_(std::move(store)) {}
  void bind(const ModelConfig& target);

  Eagle3Config config_;
  TensorStore store_;
  Eagle3Weights weights_;
  std::string layer_prefix_;
};

}  // namespace moeserve::speculative
