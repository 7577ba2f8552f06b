// The published GPT-OSS shapes, as the config.json of openai/gpt-oss-20b and openai/gpt-oss-120b give them (and
// openai/gpt-oss gpt_oss/torch/model.py): for make-tiny --shape and the CUDA runner's synthetic weights.
#pragma once

#include <string>

#include "model/config.h"

namespace moeserve::gpt_oss {

// Sets the dimensions of the named model in `config` (layers, widths, heads, experts, vocabulary, window); the
// rest is the caller's. Fails naming the shape and the known ones when it is neither "gpt-oss-20b" nor
// "gpt-oss-120b".
void apply_known_shape(const std::string& name, ModelConfig& config);

}  // namespace moeserve::gpt_oss
