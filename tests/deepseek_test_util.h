// Test helpers for the DeepSeek-V3 family: tiny checkpoints made once per process, and edited copies of a
// checkpoint (its config.json or its tensors changed) for the bad-input tests.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/deepseek_v3/checkpoint.h"
#include "model/deepseek_v3/make_tiny.h"
#include "model/safetensors.h"

namespace moeserve::testing {

// The checkpoint for these options (make-tiny --family deepseek-v3), written once per test process.
std::string tiny_deepseek_model(const deepseek_v3::TinyOptions& options = {});

// The tiny model with a vocabulary of 1024 (fast tests without the tokenizer), opened once per test process.
std::shared_ptr<const deepseek_v3::Checkpoint> small_deepseek_checkpoint();

// A copy of the one-file checkpoint `dir` whose config.json and tensors went through the edits.
std::string edited_deepseek_copy(const std::string& dir, const std::function<void(nlohmann::json&)>& edit_config,
                                 const std::function<void(std::vector<TensorToWrite>&)>& edit_tensors = {});

// A tensor of `name` with these bytes.
TensorToWrite tensor_of(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

}  // namespace moeserve::testing
