// An independent, plain reading of transformers' DeepseekV3ForCausalLM (models/deepseek_v3/modeling_deepseek_v3.py)
// for the tests: double precision over the checkpoint's weights dequantised element by element, written the way
// transformers computes (RoPE by its interleave permutation and rotate_half, per-head keys and values expanded
// through kv_b_proj, the router by sorting with dropped groups filled with 0.0), sharing no code with the runner.
// It checks the CPU runner before and beside the oracle fixture, and the MTP drafter (which transformers does not
// run) through the same pieces: enorm, hnorm, eh_proj, a decoder layer, shared_head.norm, the lm_head.
#pragma once

#include <cstdint>
#include <vector>

#include "model/deepseek_v3/checkpoint.h"

namespace moeserve::testing {

using Rows = std::vector<std::vector<double>>;

struct ReferenceOutput {
  Rows logits;  // [tokens][vocab]
  Rows hidden;  // [tokens][hidden]: after model.norm (the MTP module's input, as vLLM and SGLang take it)
};

// The model over one causal sequence at positions 0, 1, ...
ReferenceOutput reference_forward(const deepseek_v3::Checkpoint& checkpoint, const std::vector<int32_t>& tokens);

// The MTP module over draft positions 0, 1, ... (causal among them): position i takes hidden[i] and the embedding
// of next_tokens[i]. Returns the draft logits and, in `out_hidden`, the module's outputs after shared_head.norm.
Rows reference_mtp(const deepseek_v3::Checkpoint& checkpoint, const Rows& hidden, const std::vector<int32_t>& next_tokens,
                   Rows* out_hidden = nullptr);

// max over rows of ||a - b|| / ||b||.
double worst_relative_error(const std::vector<float>& ours, int64_t rows, const Rows& reference);

}  // namespace moeserve::testing
