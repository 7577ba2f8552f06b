// Deterministic DeepSeek-V3 checkpoints with random weights (make-tiny --family deepseek-v3): the tiny model the
// family's tests and the transformers oracle run on, and DeepSeek-R1's full width at reduced depth for speed work.
// Every feature of the architecture is exercised by the tiny one: q_lora_rank set, a dense first layer, 4 groups
// of 4 experts with topk_group 2 < n_group, a shared expert, positive e_score_correction_bias (large enough to
// change the choice; positive so that transformers' 0.0 fill of dropped groups equals DeepSeek's -inf), YaRN with
// mscale and mscale_all_dim, v_head_dim != qk_nope_head_dim, the MTP layer, and FP8 e4m3 weights with 128 x 128
// scales whose last row and column blocks are partial (kv_a_proj_with_mqa's 160 rows, kv_b_proj's 144 columns).
//
// FP8 weights are quantised from random values as DeepSeek's were: per block, scale = amax / 448 and
// e4m3(value / scale), rounded to nearest even. The bytes depend only on the options: every value is a hash of
// (seed, tensor name, index) turned into a float with exactly rounded arithmetic (model/tiny_random.h).
#pragma once

#include <cstdint>
#include <string>

#include "model/deepseek_v3/config.h"

namespace moeserve::deepseek_v3 {

struct TinyOptions {
  uint64_t seed = 0;
  int layers = 0;  // num_hidden_layers; 0: 3 (tiny) or 4 (deepseek-r1); the first min(1 or 3, layers - 1) dense
  int vocab = 0;   // 0: DeepSeek-V3's 129280, the tokenizer's ids and the unused rows after them
  int shards = 1;
  bool fp8 = true;  // false: bf16 weights without quantization_config
  std::string shape;  // "": tiny; "deepseek-r1": DeepSeek-R1's widths with random weights
};

Config tiny_config(const TinyOptions& options);

// Writes config.json, generation_config.json, the safetensors files, and (with the real vocabulary) DeepSeek-R1's
// tokenizer.json and tokenizer_config.json into out_dir, creating it.
void make_tiny_checkpoint(const TinyOptions& options, const std::string& out_dir);

// Where DeepSeek-R1's tokenizer files are (scripts/setup.sh writes them into the build directory;
// MOESERVE_DEEPSEEK_TOKENIZER overrides it).
std::string deepseek_tokenizer_dir();

}  // namespace moeserve::deepseek_v3
