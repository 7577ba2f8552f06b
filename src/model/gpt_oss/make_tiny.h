// Deterministic GPT-OSS checkpoints with random weights: the tiny model every test and the README's main job
// run on, and full-size shapes (gpt-oss-20b / gpt-oss-120b) for speed measurements. The bytes written depend
// only on the options: every tensor element is a hash of (seed, tensor name, index), computed with integer and
// exactly rounded float arithmetic only.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace moeserve {

struct TinyModelOptions {
  uint64_t seed = 0;
  int layers = 4;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 64;
  int experts = 8;
  int top_k = 4;
  int intermediate = 64;
  int vocab = 201088;  // the real o200k_harmony vocabulary, so the real tokenizer drives the tiny model
  int window = 32;     // shorter than the test prompts, so the sliding window is exercised
  CheckpointLayout layout = CheckpointLayout::huggingface;
  ExpertFormat expert_format = ExpertFormat::mxfp4;
  int shards = 1;
  std::string shape;  // "", "gpt-oss-20b" or "gpt-oss-120b": real dimensions (overrides the sizes above)
};

ModelConfig tiny_model_config(const TinyModelOptions& options);

// Writes config.json, generation_config.json and the safetensors files (plus dtypes.json for the original
// layout) into out_dir, creating it.
void make_tiny_checkpoint(const TinyModelOptions& options, const std::string& out_dir);

}  // namespace moeserve
