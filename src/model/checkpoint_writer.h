// Writing a checkpoint's tensors as Hugging Face's save_pretrained lays them out: one model.safetensors, or
// `shards` files named by `shard_name` (a fmt pattern taking the shard number and the count) with
// model.safetensors.index.json mapping each tensor to its file. Tensors are written in name order, split into
// shards of equal tensor counts. make-tiny's writers (GPT-OSS, DeepSeek-V3) share it.
#pragma once

#include <string>
#include <vector>

#include "model/safetensors.h"

namespace moeserve {

inline constexpr const char* kHfShardName = "model-{:05d}-of-{:05d}.safetensors";

void write_checkpoint_tensors(const std::string& out_dir, std::vector<TensorToWrite> tensors, int shards,
                              const std::string& shard_name = kHfShardName);

}  // namespace moeserve
