// DeepSeek-V3's feed-forward blocks on the CPU: the dense SwiGLU MLP of the first layers, and the MoE layer (the
// noaux_tc router, each chosen expert's MLP weighted, plus the shared expert on the same input, always with weight
// 1: transformers' DeepseekV3MoE, DeepSeek's MoE). Experts run once over the tokens routed to them; a token's
// weighted outputs are summed in ascending expert order, then the shared expert's is added.
#pragma once

#include <climits>
#include <cstdint>

#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/weights.h"
#include "util/thread_pool.h"

namespace moeserve::cpu {

// out[T, hidden] = down(silu(gate x) * up x) for x [T, hidden].
void mlp(ThreadPool& pool, const deepseek_v3::Mlp& m, const float* x, int64_t T, float* out);

// Which part of an MoE layer a rank computes (expert parallelism): the routed experts in [first, end) and,
// on one rank, the shared expert. The default is the whole layer.
struct ExpertShare {
  int first_expert = 0;
  int end_expert = INT32_MAX;
  bool shared = true;
};

// out[T, hidden] = the layer's FFN of x [T, hidden] (post_attention_layernorm already applied); of an MoE layer,
// only `share`'s part (the ranks' parts sum to the whole).
void feed_forward(ThreadPool& pool, const deepseek_v3::Config& config, const deepseek_v3::Layer& layer, const float* x,
                  int64_t T, float* out, const ExpertShare& share = {});

}  // namespace moeserve::cpu
