// A deterministic tiny EAGLE-3 draft head for a tiny target (make-tiny --eagle3), in the exact format ModelOpt
// exports for gpt-oss (its hf_spec_export.py, as in nvidia/gpt-oss-120b-Eagle3): config.json with a nested
// eagle_config, one model.safetensors with fc, the decoder layer under midlayer.* (2025 exporter) or layers.0.*
// (2026), norm, lm_head over a draft vocabulary smaller than the target's, and the d2t offsets. No embed_tokens:
// the head shares the target's embedding. Bytes depend only on the options and the target's config.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/eagle3/config.h"

namespace moeserve {

struct TinyEagle3Options {
  uint64_t seed = 0;
  int draft_vocab = 0;                // 0: min(32000, vocab / 2)
  std::string names = "midlayer";     // "midlayer" or "layers" (layers.0.*)
  bool input_norm = false;            // norm_before_fc with input_norm.weight
};

// The draft config for this target: the target's width and heads, three aux layers spread over its depth,
// Llama 3.1's RoPE scaling.
speculative::Eagle3Config tiny_eagle3_config(const TinyEagle3Options& options, const ModelConfig& target);

// Writes config.json and model.safetensors into out_dir (created) for the checkpoint in target_dir.
void make_tiny_eagle3(const TinyEagle3Options& options, const std::string& target_dir, const std::string& out_dir);

}  // namespace moeserve
