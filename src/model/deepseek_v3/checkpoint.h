// A DeepSeek-V3 checkpoint directory (DeepSeek-V3, DeepSeek-R1), opened: its config, its mapped tensors and their
// views by role. Hugging Face layout (model.layers.N.*), one model.safetensors or shards named by
// model.safetensors.index.json (a weight and its scales may sit in different shards). Every tensor is bound with
// its shape and dtype checked against the config; an FP8 weight needs its <name>_scale_inv of the config's block
// shape; the MTP module (layer num_hidden_layers) is bound when the checkpoint has it; leftovers are errors.
#pragma once

#include <memory>
#include <string>

#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/weights.h"
#include "model/safetensors.h"

namespace moeserve::deepseek_v3 {

class Checkpoint {
 public:
  // Opens and validates every tensor against the config; fails naming the file and tensor.
  static std::unique_ptr<Checkpoint> open(const std::string& dir);

  const Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  const TensorStore& tensors() const { return store_; }
  const std::string& directory() const { return store_.directory(); }
  bool has_mtp() const { return weights_.mtp.has_value(); }
  // The weights' formats, for benchmark records: {"projections": "FP8 e4m3, 128 x 128 block scales" | dtype, ...}.
  nlohmann::json weight_formats() const;

 private:
  Checkpoint(Config config, TensorStore store);
  void bind_weights();

  Config config_;
  TensorStore store_;
  Weights weights_;
};

}  // namespace moeserve::deepseek_v3
