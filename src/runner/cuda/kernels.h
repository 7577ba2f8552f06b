// The CUDA runner's kernels as the host sees them: parameter structs and one launcher per operation. Each
// launcher lives in its own .cu file beside its kernels; each is tested against the CPU reference operation in
// runner/cpu/ops.h (tests/runner/cuda). All launchers enqueue on `stream` and never synchronise, so a decode
// step can be captured in a CUDA graph.
//
// Numerics: the residual stream, norms, softmax and every accumulation are fp32. With Precision::bf16 the
// activations that feed matrix products (normed rows, q, attention output, expert intermediates) and the KV
// cache are bf16, and dense weights are bf16. Precision::f32 keeps all of them fp32 and uses the simple kernels;
// it exists to check the fast path and to match the CPU runner token for token. Experts stay MXFP4 in both.
// With Precision::bf16 the KV cache may instead be fp8 e4m3 (KvDtype), dequantised in the attention kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "runner/cuda/mla_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/parallel/vocab_best.h"
#include "sampling/sampling_params.h"

namespace moeserve::cuda {

enum class Precision { bf16, f32 };
inline size_t element_bytes(Precision p) { return p == Precision::bf16 ? 2 : 4; }

// The KV cache's element type: f32 with Precision::f32; bf16 or fp8 e4m3 (vLLM's --kv-cache-dtype fp8_e4m3: one
// float scale per layer for K and one for V, value = stored * scale) with Precision::bf16.
enum class KvDtype { f32, bf16, fp8_e4m3 };
inline size_t kv_element_bytes(KvDtype d) { return d == KvDtype::f32 ? 4 : d == KvDtype::bf16 ? 2 : 1; }

// One forward step's metadata on the device (built by step_metadata.h), as kernels read it.
struct StepView {
  int num_tokens = 0;               // T: rows of every activation
  int num_seqs = 0;                 // S
  int num_groups = 0;               // KV groups (GPT-OSS: sliding, full)
  const int32_t* token_ids = nullptr;    // [T]
  const int32_t* positions = nullptr;    // [T] for RoPE and the window: the KV slot too, except in a tree step
  const int32_t* token_seq = nullptr;    // [T] sequence of each token
  const int32_t* seq_q_start = nullptr;  // [S] row of the sequence's first token
  const int32_t* seq_q_len = nullptr;    // [S] tokens of the sequence in this step
  const int32_t* seq_context = nullptr;  // [S] start_position + q_len
  const int32_t* table_stride = nullptr; // device scalar: entries per block table (graphs replay other strides)
  const int32_t* block_tables = nullptr; // [S][num_groups][*table_stride], -1 for blocks given back
  const int32_t* q_tile_seq = nullptr;   // [num_q_tiles] prefill attention: sequence of each 64-row query tile
  const int32_t* q_tile_row0 = nullptr;  // [num_q_tiles] first row of the tile inside its sequence
  int num_q_tiles = 0;
  // Decode attention: first token of each query group, kDecodeTileRows / heads-per-KV-head consecutive tokens of
  // one sequence (fewer at the sequence's end), for the sequences without prefill tiles; disjoint from them.
  const int32_t* decode_token0 = nullptr;  // [num_decode_groups]
  int num_decode_groups = 0;
  // Tree steps only (null otherwise; runner.h's SequenceStep::tree_parent): [T][2][2] words, per token two 64-bit
  // masks (low word first) over the step indices of its sequence, the keys of the step it sees: for full layers
  // itself and its ancestors, for sliding layers those inside the window. All ones for a causal sequence's tokens.
  // A tree token writes its KV at slot start_position + its index in the step (token_slot in device_common.cuh).
  const int32_t* tree_masks = nullptr;
};
inline constexpr int kMaxTreeTokens = 64;  // one mask bit per token of a tree
// What the target model's kernels are built for, checked against a model's config before it runs (CudaRunner):
// the attention kernels (attention_decode*, attention_prefill) handle heads of 64 dims; the router and the expert
// grouping (router, moe_grouping) up to 256 experts, top-8.
inline constexpr int kAttentionHeadDim = 64;
inline constexpr int kMaxExperts = 256;
inline constexpr int kMaxTopK = 8;
inline constexpr int kDecodeTileRows = 16;  // decode attention's (token, head) rows per group: the mma's M
inline int decode_group_tokens(int heads_per_kv) { return kDecodeTileRows / heads_per_kv; }
// Prefill attention's work list: tiles of this many consecutive query tokens of one sequence (q_tile_*); the
// kernel splits each among its blocks.
inline constexpr int kPrefillTileRows = 64;

// The paged KV pool: [block][layer slot][K, V][kv_head][block_size][head_dim] of `dtype`.
struct KvView {
  void* base = nullptr;
  int block_size = 0;
  int layers_per_block = 0;  // the largest KV group's layer count
  int kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::bf16;
};

// ---- embedding.cu: row gathers -------------------------------------------------------------------------------
// x[t] = float(table[ids[t]]) for T rows of width H; table is bf16 or fp32 (`table_type`).
void launch_embedding(cudaStream_t stream, Precision table_type, const void* table, int64_t H, const int32_t* ids,
                      int T, float* x);
// dst[r] = src[rows[r]] for R rows of H elements of the precision's type.
void launch_gather_rows(cudaStream_t stream, Precision type, const void* src, int64_t H, const int32_t* rows, int R,
                        void* dst);

// ---- rms_norm.cu: residual add fused with RMSNorm ---------------------------------------------------------------
// The MoE output folded into the residual: x[t] += sum_j weights[t, j] * y[slot_row[t, j]].
struct ExpertCombine {
  const float* y = nullptr;           // [rows, H] expert outputs in grouped order
  const int32_t* slot_row = nullptr;  // [T, top_k] row of y for each (token, slot); -1: another rank's expert
  const float* weights = nullptr;     // [T, top_k]
  int top_k = 0;
  // Instead of y: the expert outputs as bf16 [rows, H] (the second projection with MoeGemmParams::out_bf16).
  const void* y_bf16 = nullptr;
};
// x += delta (when set) or the expert combine (when set); out = x / sqrt(mean(x^2) + eps) * scale. delta_bias
// (with delta; null: none) is added to each delta value first, (delta + bias) in fp32: the bias of a projection that
// could not add it (the FP8 output projection), the same bits as its epilogue would give.
void launch_add_rms_norm(cudaStream_t stream, Precision out_type, float* x, const float* delta,
                         const ExpertCombine* combine, const float* scale, int T, int H, float eps, void* out,
                         const float* delta_bias = nullptr);
// launch_add_rms_norm with out quantised for an FP8 block-scaled projection (fp8_gemm.h's fp8_dense_product), so
// that the projection's input is not quantised by a launch of its own: values [T, H] e4m3 and one scale a token a
// 128 columns, scale (t, group) at group * scale_rows + t (scale_rows >= T: the product's padded rows), each the
// act_quant of the fp32 normalised values (s = max(amax, 1e-4) / 448, q = e4m3(value / s); quantize_activations_fp8).
void launch_add_rms_norm_e4m3(cudaStream_t stream, float* x, const float* delta, const ExpertCombine* combine,
                              const float* scale, int T, int H, float eps, uint8_t* values, float* scales,
                              int64_t scale_rows, const float* delta_bias = nullptr);
// out[T, H] = the expert combine alone (the same sums launch_add_rms_norm adds): a tensor-parallel rank combines its
// own rows, whose grouped order is its own, before the ranks sum the results.
void launch_moe_combine(cudaStream_t stream, const ExpertCombine& combine, int T, int H, float* out);
// launch_dense_gemv (in [rows, in_features] bf16 times weight [H, in_features] bf16, plus bias, into delta [rows, H]
// fp32) then launch_add_rms_norm with that dense delta (x += delta; out = RMSNorm(x) * scale as out_type), in one
// launch whose last block does the norm: the same bits as the two launches. For decode steps of 1-4 tokens (the
// attention's output projection). counter: one int32 on the device, zero before the first launch and left zero by each.
bool dense_gemv_add_rms_norm_supported(int rows, int64_t in_features, int H);
void launch_dense_gemv_add_rms_norm(cudaStream_t stream, Precision out_type, const void* in, int rows,
                                    const void* weight, int64_t in_features, const float* bias, float* delta, float* x,
                                    const float* scale, int H, float eps, void* out, int32_t* counter);

// ---- rope.cu: YaRN RoPE on q and k, k and v written into the paged cache -----------------------------------------
struct RopeParams {
  const float* qkv = nullptr;  // [T, (heads + 2 kv_heads) * head_dim]: q heads, then k heads, then v heads
  int heads = 0, kv_heads = 0, head_dim = 0;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  float concentration = 1.0f;
  void* q_out = nullptr;  // [T, heads, head_dim]
  KvView kv;
  int group = 0, slot = 0;  // the layer's KV group and its slot in a block
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 KV: stored = value / scale (saturated to +-448); else unused
  // Added to each qkv value as launch_rope_kv_write reads it (null: none): the bias of a QKV projection that could not
  // add it (the FP8 one: cuBLASLt's block-scaled product takes no bias epilogue), the same fp32 sum.
  const float* qkv_bias = nullptr;
  // Read instead of qkv when set: the rows as bf16 (the FP8 product's output; half the bytes of fp32 rows).
  const void* qkv_bf16 = nullptr;
};
// q as the precision's type; K and V as kv.dtype (bf16 or fp8 with Precision::bf16, f32 with Precision::f32).
// version: 1 (a rotary pair a thread), 2 (four pairs a thread, wide loads and stores; head_dim a multiple of 8, else
// version 1; not yet run on a GPU), 0: version 1 unless MOESERVE_ROPE_VERSION=2.
void launch_rope_kv_write(cudaStream_t stream, Precision type, const RopeParams& params, const StepView& step,
                          int version = 0);
// The QKV projection (x [rows, in_features] bf16 times weight [(heads + 2 kv_heads) head_dim, in_features] bf16, plus
// bias) with the rope_kv_write above in its epilogue: one launch for decode steps of at most kMaxDenseGemvRows tokens
// (rows = the step's tokens), writing q and the KV cache as launch_dense_gemv then launch_rope_kv_write would, to the
// bit; params.qkv is not read. Supported: bf16 with a bf16 or fp8 KV cache, what the dense GEMV takes, head_dim a
// multiple of 8.
bool qkv_rope_fused_supported(Precision type, int rows, int64_t in_features, const RopeParams& params);
void launch_qkv_rope_kv_write(cudaStream_t stream, Precision type, const void* x, int rows, const void* weight,
                              int64_t in_features, const float* bias, const RopeParams& params, const StepView& step);

// ---- attention_decode.cu / attention_prefill.cu ------------------------------------------------------------------
struct AttentionParams {
  const void* q = nullptr;  // [T, heads, head_dim]
  void* out = nullptr;      // [T, heads, head_dim]
  const float* sinks = nullptr;  // [heads]
  float scale = 0.0f;            // 1 / sqrt(head_dim)
  int heads = 0, kv_heads = 0, head_dim = 0;
  int window = 0;  // keys q - window + 1 .. q; 0 for full causal attention
  KvView kv;
  int group = 0, slot = 0;
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 KV: value = stored * scale; else unused
  // Prefill kernel only, with heads / kv_heads even: when set, the output is written quantised for the FP8 output
  // projection (fp8_gemm.h's fp8_dense_product) instead of into `out`: e4m3 [T, heads * head_dim] and one scale a
  // token a 128 columns (two heads), scale (t, group) at group * out_scale_rows + t, each the act_quant of the fp32
  // output values (s = max(amax, 1e-4) / 448, q = e4m3(value / s)).
  uint8_t* out_e4m3 = nullptr;
  float* out_scales = nullptr;
  int64_t out_scale_rows = 0;
};
// Decode attention on tensor cores (bf16 q, bf16 or fp8 KV): the query groups of step.decode_token0, each over
// up to `max_splits` key ranges (fewer for short contexts); the last block of a group to finish merges them.
struct DecodeScratch {
  int max_splits = 1;
  float* partial = nullptr;     // attention_decode_partial_floats(...)
  int32_t* counters = nullptr;  // [num_decode_groups * kv_heads], zero on entry and on return
};
// The fewest splits whose blocks fill the GPU's last wave (units = decode groups x KV heads).
int attention_decode_max_splits(KvDtype dtype, int heads_per_kv, int units, int multiprocessors);
size_t attention_decode_partial_floats(int units, int max_splits);
void launch_attention_decode(cudaStream_t stream, const AttentionParams& params, const StepView& step,
                             const DecodeScratch& scratch);
// The fp32 path: every query token against its cached keys, split over `splits` key ranges merged by a second
// kernel; partial holds T * heads * splits * (head_dim + 2) floats.
int attention_decode_f32_splits(int T, int kv_heads, int multiprocessors);
void launch_attention_decode_f32(cudaStream_t stream, const AttentionParams& params, const StepView& step, int splits,
                                 float* partial);
// Prefill attention over the query tiles (step.q_tile_*) on Hopper's warpgroup MMA (sm_90a), FlashAttention-3
// style; bf16 q, bf16 or fp8 KV, causal or tree steps. `blocks`: how many blocks share the launch's units (16 /
// 32 / 64 tokens of a query tile for one KV head), each running units gridDim.x apart in turn; 0: the built-in
// choice, one block a multiprocessor for sliding layers (a unit is a window's two key tiles there) and one block a
// unit for full ones (their units differ in length; the hardware's order balances them, heaviest first).
void launch_attention_prefill(cudaStream_t stream, const AttentionParams& params, const StepView& step, int blocks = 0);

// ---- mla_cache_write.cu / mla_decode.cu: DeepSeek's multi-head latent attention over a paged latent cache --------
// The pool (mla_layout.h): [block][layer][block_size][kv_lora_rank + rope_dim] of `dtype`, one KV group.
struct MlaCacheView {
  void* base = nullptr;
  MlaCacheShape shape;
  KvDtype dtype = KvDtype::bf16;
};
struct MlaCacheWriteParams {
  const float* kv_a = nullptr;         // [T, kv_lora_rank + rope_dim]: kv_a_proj_with_mqa's output, latent then k_pe
  const float* norm_weight = nullptr;  // [kv_lora_rank] kv_a_layernorm
  float eps = 0.0f;                    // its epsilon
  const float* inv_freq = nullptr;     // [rope_dim / 2] (deepseek_v3::Config::rope_inverse_frequencies)
  float rope_factor = 1.0f;            // cos and sin times this (Config::rope_attention_factor)
  MlaCacheView cache;
  int layer = 0, group = 0;            // the layer's slot in a block; its block tables' group in the step
  float scale = 1.0f;                  // fp8: stored = value / scale (saturated to +-448); else unused
};
// Each token's row at its slot (token_slot) through its sequence's block table: the RMS-normed latent, then k_pe
// rotated by rope_adjacent_pairs at the token's position. CPU reference: the latent writes of
// cpu::MlaAttention::forward.
void launch_mla_cache_write(cudaStream_t stream, const MlaCacheWriteParams& params, const StepView& step);

struct MlaDecodeParams {
  const float* q_latent = nullptr;  // [T, heads, kv_lora_rank]: q~ = W_UK^T q_nope per head (absorbed)
  const float* q_rope = nullptr;    // [T, heads, rope_dim]: q_pe, rotated
  float* out = nullptr;             // [T, heads, kv_lora_rank]: o~ = sum_j p_j c_j (the caller applies W_UV)
  float scale = 0.0f;               // deepseek_v3::Config::softmax_scale()
  int heads = 0;
  MlaCacheView cache;               // bf16 or fp8 e4m3
  int layer = 0, group = 0;
  float kv_scale = 1.0f;            // fp8: value = stored * kv_scale; else unused
};
struct MlaDecodeScratch {
  int split_keys = kMlaMaxSplitKeys;  // mla_decode_split_keys
  int max_splits = 1;                 // mla_decode_splits of the step's last visible position, at least
  float* partial = nullptr;           // mla_decode_partial_floats(T, heads, kv_lora_rank, max_splits)
};
// Absorbed MLA for every token of the step (decode, chunks, prefill; not tree steps): scores
// scale * (q~ . c + q_pe . k_pe) over the positions 0 .. its own of its sequence, softmax in fp32, o~ = sum p c,
// by the given kernel version (mla_layout.h: v1 fp32 on CUDA cores, v2 on tensor cores with bf16 q~ and p).
// CPU reference: cpu::MlaAttention's absorbed form (attend_absorbed), between its two projections.
// The process's choice of version: MOESERVE_MLA_DECODE ("v1" or "v2"; unset or empty: kMlaDecodeDefault), read at
// the first call; any other value fails there, naming the variable.
MlaDecodeVersion mla_decode_version();
void launch_mla_decode(cudaStream_t stream, const MlaDecodeParams& params, const StepView& step,
                       const MlaDecodeScratch& scratch, MlaDecodeVersion version = mla_decode_version());

// ---- mla_absorb.cu: the projections around absorbed MLA, q~ from q and the heads' outputs from o~ ------------------
// kv_b_proj on the device, [heads * (nope_dim + v_dim), kv_lora_rank] (deepseek_v3::Attention::kv_b): per head its
// nope_dim W_UK rows, then its v_dim W_UV rows; fp32, bf16, or the checkpoint's e4m3 with one fp32 scale per
// 128 x 128 block in Fp8DeviceWeight's layout (fp8_gemm.h: the block (row / 128, col / 128)'s scale at
// (row / 128) * fp8_weight_scale_ld(kv_lora_rank) + col / 128).
enum class MlaWeightType { f32, bf16, fp8_block };
struct MlaKvbView {
  const void* values = nullptr;
  const float* scales = nullptr;  // fp8_block only
  MlaWeightType type = MlaWeightType::bf16;
  int heads = 0, nope_dim = 0, v_dim = 0, kv_lora_rank = 0;
};
struct MlaAbsorbParams {
  const float* q = nullptr;         // [T, heads, nope_dim + rope_dim]: q_b_proj's output, each head nope then rope
  int rope_dim = 0;
  const float* inv_freq = nullptr;  // [rope_dim / 2], as MlaCacheWriteParams'
  float rope_factor = 1.0f;
  MlaKvbView kv_b;
  float* q_latent = nullptr;        // [T, heads, kv_lora_rank]: MlaDecodeParams::q_latent
  float* q_rope = nullptr;          // [T, heads, rope_dim]: MlaDecodeParams::q_rope
};
// Per token and head q~ = W_UK^T q_nope (fp32 sums over nope_dim in cpu::add_scaled_row's order), and q_pe rotated
// by rope_adjacent_pairs at the token's position (step.positions). CPU reference: cpu::MlaAttention's absorbed
// form, forward's RoPE on q and attend_absorbed's q~.
void launch_mla_absorb(cudaStream_t stream, const MlaAbsorbParams& params, const StepView& step);
struct MlaUnabsorbParams {
  const float* latent_out = nullptr;  // [T, heads, kv_lora_rank]: MlaDecodeParams::out, o~
  MlaKvbView kv_b;
  void* out = nullptr;                // [T, heads * v_dim] of out_type: o_proj's input
};
// Per token and head o = W_UV o~, fp32 sums over kv_lora_rank. CPU reference: attend_absorbed's last step.
void launch_mla_unabsorb(cudaStream_t stream, Precision out_type, const MlaUnabsorbParams& params, int T);

// ---- kv_move.cu: KV slots copied within one sequence (tree verification commits its accepted path) ---------------
struct KvMoveParams {
  KvView kv;
  const int32_t* moves = nullptr;        // [num_moves][from slot, to slot], applied in order
  int num_moves = 0;
  const int32_t* block_table = nullptr;  // the sequence's block table of one KV group
  int group_layers = 0;                  // the group's layers: slots 0 .. group_layers - 1 of its blocks
};
// K and V of every layer of the group and every KV head, copied from `from` to `to` move after move (rows of
// kv.dtype, copied as they are stored: a layer's fp8 scale is the same at both slots).
void launch_move_kv_slots(cudaStream_t stream, const KvMoveParams& params);

// ---- kv_fill.cu: random KV contents (benchmarks), made on the device ----------------------------------------------
// `bytes` of a pool of `dtype` filled with values uniform with unit variance (fp8: bf16 values quantised).
void fill_kv_random(cudaStream_t stream, KvDtype dtype, void* base, size_t bytes, uint64_t seed);

// ---- router.cu: top-k experts and softmax over the selected logits -------------------------------------------------
// Also counts tokens per expert into expert_counts, which must be zero on entry: launch_group_by_expert reads
// and zeroes them (so no memset per layer), and MoeBuffers zeroes them when it allocates.
void launch_route_top_k(cudaStream_t stream, const float* logits, int T, int E, int k, int32_t* experts,
                        float* weights, int32_t* expert_counts);

// ---- router_noaux_tc.cu: DeepSeek-V3's grouped sigmoid router ----------------------------------------------------
// The config's routing fields (model/deepseek_v3/config.h), read by the runner: n_routed_experts, n_group,
// topk_group, num_experts_per_tok, norm_topk_prob, routed_scaling_factor.
inline constexpr int kMaxNoauxGroups = 8;
struct NoauxTcRouting {
  int num_experts = 0, n_group = 0, topk_group = 0, top_k = 0;
  bool normalize = true;
  float scaling_factor = 1.0f;
};
// experts / weights [T, top_k] from logits [T, num_experts] (fp32) and the correction bias [num_experts]: exactly
// cpu::route_noaux_tc's contract, experts ascending. expert_counts as launch_route_top_k's, or null.
void launch_route_noaux_tc(cudaStream_t stream, const float* logits, const float* bias, int T,
                           const NoauxTcRouting& routing, int32_t* experts, float* weights, int32_t* expert_counts);

// ---- moe_grouping.cu: (token, slot) pairs grouped by expert ----------------------------------------------------------
// With expert parallelism a rank groups only the pairs routed to its own experts, global indices [first_expert,
// first_expert + num_experts) of the router's router_experts; the other pairs get slot_row -1 (no row: the combine
// skips them) and every index here (row_expert, tile_expert, offsets) is the rank's own, so the expert kernels read
// its weights unchanged. Alone (first_expert 0, router_experts = num_experts) every pair has a row.
struct MoeRouting {
  int num_experts = 0;
  int first_expert = 0;
  int router_experts = 0;             // the router's expert count (expert_counts' length); 0: num_experts
  int32_t* expert_counts = nullptr;   // [router_experts] pairs per expert, as the router counts them
  int32_t* expert_offsets = nullptr;  // [E + 1] first grouped row of each expert
  int32_t* expert_fill = nullptr;     // [E] scratch
  int32_t* row_token = nullptr;       // [T * k] token of each grouped row
  int32_t* row_expert = nullptr;      // [T * k]
  int32_t* slot_row = nullptr;        // [T * k] grouped row of each (token, slot)
  int32_t* tile_expert = nullptr;     // [max tiles] expert of each tile of rows_per_tile rows
  int32_t* tile_row0 = nullptr;       // [max tiles] first grouped row of each tile
  int32_t* num_tiles = nullptr;       // [4] tiles in all, then (mixed tiling) those of the 32-, 16- and 8-row class
  int tile_class = -1;                // a launch over one class's tiles only (0, 1, 2: 32, 16, 8 rows); -1: all
  MoeMixedBounds mixed;               // the mixed tiling's classes (the grouping and the launches read the same)
};
// Tiles of rows_per_tile rows (moe_rows_per_tile of the path that reads them); moe_max_tiles bounds their count.
// rows_per_tile kMoeMixedTileRows (decode_mma_mixed): each expert's rows cut into tiles of one width chosen by its
// own count (routing.mixed: up to n8_max rows in 8-row tiles, up to n16_max in 16-row tiles, beyond in 32-row
// tiles), listed by class, the 32-row tiles first, then the 16- and 8-row ones, with each class's count in
// num_tiles[1 + class]; at most moe_max_tiles(rows, 8, E) tiles.
void launch_group_by_expert(cudaStream_t stream, const int32_t* experts, int T, int k, int rows_per_tile,
                            const MoeRouting& routing);
// launch_route_top_k then launch_group_by_expert as one kernel of one block, for decode-sized steps (E = the router's
// experts, routing.router_experts or num_experts): the same experts, weights (bit for bit), offsets and tiles, and
// rows inside an expert in (token, slot) order, one order of the many the two launches' atomics may give.
// expert_counts are neither read nor written (zero before and after, as the two launches leave them).
// kRouteGroupMaxTokens: what the kernel takes (a warp of the block's 32 routes one token after another: up to two
// tokens at 64). kRouteGroupRunnerTokens: what the runner gives it, one token a warp. Measured on an H100
// (cuda_bench, gpt-oss-120b, 2026-12-06): fused at every step up to 64 tokens, batch 1 3.90 -> 3.87 ms, batch 8
// 9.87 -> 9.83 ms, but batch 64 22.98 -> 23.20 ms (two tokens a warp cost more than the launch saved).
inline constexpr int kRouteGroupMaxTokens = 64;
inline constexpr int kRouteGroupRunnerTokens = 32;
inline bool route_group_fused_fits(int T, int k, int E) {
  return T <= kRouteGroupMaxTokens && k >= 1 && k <= kMaxTopK && k <= E && E <= kMaxExperts;
}
void launch_route_top_k_and_group(cudaStream_t stream, const float* logits, int T, int E, int k, int32_t* experts,
                                  float* weights, int rows_per_tile, const MoeRouting& routing);
// The router's projection (x [T, in_features] bf16 times weight [E, in_features] bf16, plus bias, into logits [T, E]
// fp32: launch_dense_gemv's very sums) and launch_route_top_k_and_group in one launch, for steps of 1-4 tokens: the
// last of its ceil(E / 8) blocks to finish routes and groups. counter: one int32 on the device, zero before the
// first launch; each launch leaves it zero again (so a graph may replay it), and launches sharing it must not overlap.
bool router_route_group_fused_supported(int T, int64_t in_features, int E, int k);
void launch_router_route_and_group(cudaStream_t stream, const void* x, int T, const void* weight, int64_t in_features,
                                   const float* bias, int E, int k, float* logits, int32_t* experts, float* weights,
                                   int rows_per_tile, const MoeRouting& routing, int32_t* counter);

// ---- moe_*.cu: expert projections over grouped rows, MXFP4 weights dequantised on the fly -------------------------------
struct ExpertWeightsView {
  // MXFP4 blocks (16 bytes) and scale bytes of E experts [E, out, in / 32], each expert tiled for streaming
  // (moe_layout.h: mxfp4_tiled_index; out x mxfp4_padded_blocks(in / 32) elements an expert).
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  const float* bias = nullptr;      // [E, out]
  int64_t out_features = 0, in_features = 0;
  // Each weight row's largest block scale byte [E, out] (launch_mxfp4_row_scale_max): the FP8 grouped GEMM folds
  // the block scales into e4m3 exponents relative to it (moe_layout.h).
  const uint8_t* row_scale_max = nullptr;
};
struct MoeGemmParams {
  ExpertWeightsView w;
  const void* x = nullptr;            // input rows (precision type), [*, in_features]
  const int32_t* x_row = nullptr;     // x row of each grouped row (row_token for the first projection); null: identity
  void* out = nullptr;                // swiglu: [rows, out / 2] precision type; else [rows, out] fp32 (or bf16: out_bf16)
  bool swiglu = false;                // out = swiglu(h) over interleaved gate/up rows, with the model's clamp
  float swiglu_alpha = 0.0f, swiglu_limit = 0.0f;
  MoeRouting routing;
  int rows = 0;  // T * k grouped rows
  // FP8 activations (--activation-dtype fp8; the paths moe_path_takes_fp8 names): x as e4m3 rows [*, in_features] and each x row's
  // scale (x ~ x_fp8 * x_scale; launch_quantize_rows_e4m3). When set, x is not read.
  const uint8_t* x_fp8 = nullptr;
  const float* x_scale = nullptr;
  // Not swiglu: out as bf16 rows instead of fp32 (the paths moe_path_writes_bf16 names; half the bytes the
  // projection writes and the combine reads back; each output rounded once, 2^-9 relative at most).
  bool out_bf16 = false;
  // prefill_wgmma_hot (moe_plan.h): the scratch of moe_hot_bytes(slots, w.out_features, w.in_features, fp8) bytes the
  // hot experts' weights are dequantised into, how many it holds, and the rows that make an expert hot.
  struct Hot {
    uint8_t* tiles = nullptr;
    int slots = kMoeHotSlotsDefault;
    int min_rows = kMoeHotMinRowsDefault;
  } hot;
};
// ---- activation_fp8.cu: per-row dynamic FP8 (e4m3) quantisation of activations ------------------------------------
// Row r of x [rows, cols] (bf16): scale[r] = amax / 448 (1 for an all-zero row) and q[r, c] = e4m3(x[r, c] * (448 /
// amax)), round to nearest even, saturating (vLLM's dynamic per-token FP8). cols must be a multiple of 8.
inline constexpr float kE4m3Max = 448.0f;
void launch_quantize_rows_e4m3(cudaStream_t stream, const void* x, int rows, int64_t cols, uint8_t* q, float* scale);
// The paths (moe_plan.h) and their tiles; every launcher checks the shape (check_moe_gemm_shape) and returns
// at once for rows == 0. All but the reference are bf16 only.
// Small batches (decode): tensor-core GEMV, tiles of 8 * n_tiles rows.
void launch_moe_decode(cudaStream_t stream, const MoeGemmParams& params, int n_tiles);
// Decode at large batch: tiles of tile_rows = 16, 32 or 64 rows, each expert's weights read once (sm_90a wgmma).
void launch_moe_decode_wgmma(cudaStream_t stream, const MoeGemmParams& params, int tile_rows);
// Decode at batch 8-64 rows per expert: tiles of tile_rows = 8, 16, 32 or 64 rows (kMoeMixedTileRows: one launch per
// class of the mixed grouping, each of its width), each expert's weights read once,
// activations shared through shared memory (mma.sync).
void launch_moe_decode_mma(cudaStream_t stream, const MoeGemmParams& params, int tile_rows);
// The same over at most max_tiles tiles of tile_rows (8, 16, 32 or 64) rows: the grid's bound, for a launch over one
// class of a split grouping (params.routing.tile_class).
void launch_moe_decode_mma_tiles(cudaStream_t stream, const MoeGemmParams& params, int tile_rows, int max_tiles);
// Large batches (prefill): grouped GEMM over tiles of kMoePrefillTileRows rows, mma.sync.
void launch_moe_prefill(cudaStream_t stream, const MoeGemmParams& params);
// The same on wgmma with a warp-specialised producer / consumer pipeline (sm_90a).
void launch_moe_prefill_wgmma(cudaStream_t stream, const MoeGemmParams& params);
// The same kernel over 256-row tiles x 128 weight rows (MoePath::prefill_wgmma_m256; bf16 activations only).
void launch_moe_prefill_wgmma_m256(cudaStream_t stream, const MoeGemmParams& params);
// The 128-row kernel with four raw stages a producer group (MoePath::prefill_wgmma_deep; bf16 activations only).
void launch_moe_prefill_wgmma_deep(cudaStream_t stream, const MoeGemmParams& params);
// prefill_wgmma over the launch's tiles with its hot experts (params.hot: at least min_rows rows, the first `slots` in
// expert order) first dequantised into params.hot.tiles and copied from there (MoePath::prefill_wgmma_hot's wide part).
void launch_moe_prefill_wgmma_hot(cudaStream_t stream, const MoeGemmParams& params);
// The plain version: one thread per output, any precision (needs routing.row_expert).
void launch_moe_reference(cudaStream_t stream, Precision type, const MoeGemmParams& params);
// The launcher of `path` (moe_dispatch.cc); `type` matters to the reference only.
void launch_moe_path(cudaStream_t stream, MoePath path, Precision type, const MoeGemmParams& params);
// Multiprocessors of the current device (the persistent kernels' grids), cached per device.
int device_multiprocessors();

// ---- dense_gemv.cu: decode-sized dense projections (bf16), beside cuBLASLt for larger batches ------------------------
inline constexpr int kMaxDenseGemvRows = 4;
bool dense_gemv_supported(int rows, int64_t in_features);
// y[rows, N] (fp32) = x[rows, K] W[N, K]^T + bias (may be null).
void launch_dense_gemv(cudaStream_t stream, const void* x, int rows, const void* weight, int64_t out_features,
                       int64_t in_features, const float* bias, float* y);

// ---- sampling.cu -----------------------------------------------------------------------------------------------------
// Greedy: the lowest id of the largest logit of each of R rows.
void launch_argmax(cudaStream_t stream, const float* logits, int R, int V, int32_t* out);
// A logits row that samples (params not greedy), with its sampling stream position.
struct SampleRow {
  int32_t row = 0;  // logits row, and the slot of out[] its token goes to
  uint64_t sample_index = 0;
  SamplingParams params;
};
// out[rows[i].row] = sample_token(logits row, params, sample_index) for n non-greedy rows (see sampling.cu for
// the one way the two can differ: a draw within rounding of a cumulative boundary).
void launch_sample(cudaStream_t stream, const float* logits, int V, const SampleRow* rows, int n, int32_t* out);

// ---- vocab_parallel.cu: the distributed argmax of a rank holding a slice of the vocabulary ---------------------------
// out[r] = (logits[r, local[r]], begin + local[r]) for R rows of `slice` logits (local: launch_argmax's ids).
void launch_vocab_best(cudaStream_t stream, const float* logits, int R, int slice, int64_t begin, const int32_t* local,
                       VocabBest* out);
// out[r] = the token of merge_vocab_best over the ranks' bests all[ranks][R].
void launch_merge_vocab_best(cudaStream_t stream, const VocabBest* all, int R, int ranks, int32_t* out);

// ---- synthetic.cu: random tensors made on the device ----------------------------------------------------------------------
// Values mean + std * u, u uniform with unit variance, a pure function of (key, index).
void launch_fill_uniform(cudaStream_t stream, Precision type, void* out, int64_t n, uint64_t key, float mean, float std);
void launch_fill_bytes(cudaStream_t stream, uint8_t* out, int64_t n, uint64_t key);
// E8M0 scales 127 + exponent or one less.
void launch_fill_scales(cudaStream_t stream, uint8_t* out, int64_t n, uint64_t key, int exponent);
// Largest byte of an array (MXFP4 scale check), into *result (a device int).
void launch_max_byte(cudaStream_t stream, const uint8_t* bytes, int64_t n, int32_t* result);
// Each MXFP4 weight row's largest scale byte (scales of `experts` experts of `rows` rows, tiled: moe_layout.h) into
// row_max [experts * rows], and into *wide_rows (a device int, zeroed first) the count of rows whose scales span more
// than kMxfp4E4m3ExactSpan: the rows the FP8 grouped GEMM rounds (moe_layout.h).
void launch_mxfp4_row_scale_max(cudaStream_t stream, const uint8_t* scales, int64_t experts, int64_t rows,
                                int blocks_per_row, uint8_t* row_max, int32_t* wide_rows);
// MXFP4 blocks uploaded in the checkpoint's order into the device's packed order (moe_layout.h: mxfp4_pack_word),
// in place; bytes a multiple of 16 (whole blocks).
void launch_mxfp4_pack(cudaStream_t stream, uint8_t* blocks, int64_t bytes);
// MXFP4 experts in the checkpoint's order ([experts, rows, blocks_per_row] blocks and scales) into the device's tiled
// order (moe_layout.h), into buffers of mxfp4_tiled_elements(...) blocks and scale bytes, the pads zeroed. Not in place.
int64_t mxfp4_tiled_elements(int64_t experts, int64_t rows, int blocks_per_row);
void launch_mxfp4_tile(cudaStream_t stream, uint8_t* blocks_out, uint8_t* scales_out, const uint8_t* blocks_in,
                       const uint8_t* scales_in, int64_t experts, int64_t rows, int blocks_per_row);

}  // namespace moeserve::cuda
