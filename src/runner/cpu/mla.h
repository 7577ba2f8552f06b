// Multi-head latent attention (DeepSeek-V2/V3 MLA) on the CPU, over a cache of latents: per token and layer the
// normed latent c (kv_lora_rank values) and the rotated shared rope key k_pe (qk_rope_head_dim), 576 values for
// DeepSeek-V3. Two forms of the same function:
//   naive (what transformers computes): per head, keys [W_UK c ; k_pe] and values W_UV c are expanded from every
//     visible latent, scores scale * q.k over qk_head_dim, softmax in fp32, o = sum p v;
//   absorbed (DeepSeek's attn_impl "absorb", what the GPU runs): q~ = W_UK^T q_nope, scores
//     scale * (q~.c + q_pe.k_pe), o = W_UV (sum p c): MQA over the latent, no expansion.
// They agree within fp32 rounding (tested). The scale is the config's softmax_scale() for both (not 576^-0.5).
//
// The caller owns the cache: each query row says where its own latent goes and which latents it sees, as indices
// into its key set (a sequence's cached rows). The rows write their latents first, so a row sees the latents of
// the step's earlier rows (and its own).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/weights.h"
#include "util/thread_pool.h"

namespace moeserve::cpu {

enum class MlaForm { naive, absorbed };

// The latent rows (Config::latent_width() floats each) that one sequence's queries may see.
struct MlaKeySet {
  std::vector<const float*> latents;
};

struct MlaQuery {
  int32_t position = 0;          // for RoPE
  float* latent = nullptr;       // where this token's latent is written
  int32_t key_set = 0;           // index into the key sets
  std::vector<int32_t> visible;  // indices into the key set's latents, in position order (ends with its own)
};

class MlaAttention {
 public:
  MlaAttention(const deepseek_v3::Config& config, MlaForm form);

  // x [R, hidden] (normed) -> out [R, hidden]; writes each query's latent before any attention reads it.
  void forward(ThreadPool& pool, const deepseek_v3::Attention& w, const float* x, std::span<const MlaQuery> queries,
               std::span<const MlaKeySet> key_sets, float* out);

  MlaForm form() const { return form_; }

 private:
  // Per head outputs [R, heads * v_head_dim] from queries q [R, heads * qk_head_dim] (rope part rotated).
  void attend_naive(ThreadPool& pool, const deepseek_v3::Attention& w, const float* q,
                    std::span<const MlaQuery> queries, std::span<const MlaKeySet> key_sets, float* o);
  void attend_absorbed(ThreadPool& pool, const deepseek_v3::Attention& w, const float* q,
                       std::span<const MlaQuery> queries, std::span<const MlaKeySet> key_sets, float* o);

  const deepseek_v3::Config& c_;
  MlaForm form_;
  std::vector<float> inv_freq_;
  float rope_factor_;
  float scale_;
};

}  // namespace moeserve::cpu
