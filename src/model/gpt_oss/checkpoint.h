// A GPT-OSS checkpoint directory, opened: its config, its mapped tensors and their views by role.
// Layouts: Hugging Face (config.json with model_type gpt_oss, model.layers.N.* names, MXFP4 or dense experts)
// and OpenAI's original (original/config.json keys, block.N.* names, fused qkv, dtypes.json).
#pragma once

#include <memory>
#include <string>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace moeserve {

class Checkpoint {
 public:
  // Opens and validates every tensor against the config; fails naming the file and tensor.
  static std::unique_ptr<Checkpoint> open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const TensorStore& tensors() const { return store_; }
  const std::string& directory() const { return store_.directory(); }
  ExpertFormat expert_format() const { return weights_.layers.front().mlp1.format; }

 private:
  Checkpoint(ModelConfig config, TensorStore store);
  void bind_weights();

  ModelConfig config_;
  TensorStore store_;
  ModelWeights weights_;
};

}  // namespace moeserve
