// The EAGLE-3 draft head's own kernels (eagle3_kernels.cu), beside the runner's launchers in kernels.h that it
// reuses (add + RMSNorm, dense GEMV, argmax, row gathers). The head's KV cache is its own paged pool of bf16
// slots, [block][block_size][K, V][kv_dim], addressed through per-row metadata on the device (DraftRows).
//
// A row's metadata holds base values; kernels add `step` to its position, KV slot and prefix, so a chain's k
// draft steps replay one set of metadata (step j runs at base position + j). CPU reference: the decoder layer of
// speculative::Eagle3Drafter (runner/cpu/eagle3_drafter.cc), which the tests compare with.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moeserve::cuda {

// The draft KV pool: num_blocks (+ spare) blocks of block_size slots, each K then V of kv_dim bf16.
struct DraftKvView {
  void* base = nullptr;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

// Per-row device metadata of one draft forward.
struct DraftRows {
  int rows = 0;
  const int32_t* table_stride = nullptr;  // device scalar: entries per block table
  const int32_t* block_tables = nullptr;  // [row_table[r]][*table_stride] physical blocks of the row's sequence
  const int32_t* row_table = nullptr;     // [rows]
  const int32_t* position = nullptr;      // [rows] RoPE position (+ step)
  const int32_t* slot = nullptr;          // [rows] logical KV slot the row writes (+ step)
  const int32_t* prefix = nullptr;        // [rows] attends logical slots [0, prefix + step) ...
  const int32_t* extra_begin = nullptr;   // [rows] ... then extra_slots[extra_begin, + extra_count) (tree ancestors
  const int32_t* extra_count = nullptr;   // [rows]     and the row's own slot)
  const int32_t* extra_slots = nullptr;
  int step = 0;
};

// attn_in[r] = (input_layernorm(embedding[token[r]]), hidden_norm(g[r])) in bf16, [rows, 2H]; residual[r] = g[r],
// or hidden_norm(g[r]) when norm_before_residual.
struct DraftLayerInput {
  const void* embedding = nullptr;  // bf16 [vocab, H]
  const int32_t* tokens = nullptr;  // [rows] target ids
  const float* g = nullptr;         // [rows, H]
  const float* input_layernorm = nullptr;
  const float* hidden_norm = nullptr;
  int hidden = 0;
  float eps = 0.0f;
  bool norm_before_residual = false;
  void* attn_in = nullptr;
  float* residual = nullptr;
};
void launch_draft_layer_input(cudaStream_t stream, const DraftLayerInput& params, int rows);

// Llama RoPE (rotate-half) on q and k of qkv [rows, (heads + 2 kv_heads) * head_dim] (fp32); q to q_out (bf16),
// k and v into the rows' KV slots.
void launch_draft_rope_kv_write(cudaStream_t stream, const float* qkv, int heads, const float* inv_freq,
                                void* q_out, const DraftKvView& kv, const DraftRows& rows);

// Softmax attention of each row's heads over its slots (DraftRows), GQA; q and out bf16 [rows, heads, head_dim].
void launch_draft_attention(cudaStream_t stream, const void* q, int heads, float scale, const DraftKvView& kv,
                            const DraftRows& rows, void* out);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, I + i] in bf16 (gate rows first in the fused weight).
void launch_silu_mul(cudaStream_t stream, const float* gate_up, int rows, int64_t I, void* out);

// out = bf16(x), n elements.
void launch_to_bf16(cudaStream_t stream, const float* x, int64_t n, void* out);

// A chain step's drafted tokens: target = draft_ids[r] + d2t[draft_ids[r]] (d2t null: identity) into
// next_tokens[r] (the next step's input) and drafted[r * k + depth].
void launch_draft_tokens(cudaStream_t stream, const int32_t* draft_ids, const int32_t* d2t, int rows, int k,
                         int depth, int32_t* next_tokens, int32_t* drafted);

// The k best draft ids of each logits row with their log-probabilities (log-softmax), descending, the lower id
// first on ties (speculative::top_k_ids); k <= kMaxDraftTopK.
inline constexpr int kMaxDraftTopK = 32;
void launch_top_k_log_probs(cudaStream_t stream, const float* logits, int rows, int V, int k, float* log_probs,
                            int32_t* ids);

}  // namespace moeserve::cuda
