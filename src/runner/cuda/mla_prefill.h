// MLA prefill in the expanded form (issue 17): DeepSeek-V3's naive attention (what transformers computes, and what
// vLLM and SGLang run for prefill) on tensor cores over the paged latent cache, for the sequences of a step that
// bring many query tokens. Per query token the absorbed form (mla_decode.cu) spends 2 x 128 x (576 + 512) FLOPs a
// key at V3's widths; the expanded form 2 x 128 x (192 + 128), 3.4 times fewer, once the keys' per-head K and V
// exist, which costs 2 x 512 x 32,768 FLOPs a context token: it pays when a sequence's query tokens are more than a
// few (mla_prefill.cu's header counts it; mla_layout.h's mla_prefill_pays decides it per sequence, plain C++ that the
// CPU tests check).
//
// Two kernels, one launcher (mla_prefill.cu):
//   1. expansion: every context token of the planned sequences (positions 0 .. context - 1, read from the paged
//      latent cache through the step's block tables) through kv_b: [K_nope ; V] = kv_b_h c per head, and k_pe
//      (the shared rope key) copied as stored, into a scratch contiguous per sequence;
//   2. attention: FlashAttention-2 on mma.sync m16n8k16 bf16 (fp32 accumulators): per (64 query rows, head),
//      scores scale * [q_nope ; rope(q_pe)] . [K_nope ; k_pe] over nope + rope dims, causal (query at position
//      context - q_len + i sees keys 0 .. its position), an online softmax, o = sum p V over v_dim.
// CPU reference: cpu::MlaAttention (either form: they agree in exact arithmetic) between its two projections.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

// Query rows of an attention block (and context rows of an expansion block).
inline constexpr int kMlaPrefillTileRows = 64;

// One sequence a call runs in the expanded form: its query tokens are the step's rows q_start .. q_start + q_len - 1
// at positions context - q_len .. context - 1 (a chunk of a prompt whose earlier positions are already cached, or
// a whole prompt); its keys are positions 0 .. context - 1 of the latent cache through the step's block table of
// sequence `seq`.
struct MlaPrefillSequence {
  int seq = 0;
  int q_start = 0;
  int q_len = 0;
  int context = 0;
};

// A call's work on the device: the planned sequences (their step sequence, first query row, query tokens, and first
// row in the expansion scratch, kv_row0[sequences] = kv_rows), and the attention's tiles of up to
// kMlaPrefillTileRows query rows (the tile's sequence as an index into these lists, its first query row inside it).
struct MlaPrefillWork {
  int sequences = 0, tiles = 0, kv_rows = 0;
  const int32_t* seq = nullptr;
  const int32_t* q_start = nullptr;
  const int32_t* q_len = nullptr;
  const int32_t* kv_row0 = nullptr;  // [sequences + 1]
  const int32_t* tile_seq = nullptr;
  const int32_t* tile_row0 = nullptr;
};

// The same lists on the host as one int32 array, for the caller to upload (one copy a step) and view.
struct MlaPrefillPlan {
  std::vector<int32_t> words;  // seq, q_start, q_len [sequences] each, kv_row0 [sequences + 1], tile_seq, tile_row0
  int sequences = 0, tiles = 0, kv_rows = 0;
  // The device view of `words` uploaded at `device_words`.
  MlaPrefillWork view(const int32_t* device_words) const;
};
// Fails naming the sequence unless 1 <= q_len <= context for each, and the context rows fit in int32.
MlaPrefillPlan mla_prefill_plan(const std::vector<MlaPrefillSequence>& sequences);

struct MlaPrefillParams {
  const float* q = nullptr;  // [T, heads, nope_dim + rope_dim]: q_b_proj's output, q_pe not yet rotated
  const float* inv_freq = nullptr;  // [rope_dim / 2] and the factor: q_pe's RoPE, as MlaAbsorbParams'
  float rope_factor = 1.0f;
  float scale = 0.0f;               // deepseek_v3::Config::softmax_scale()
  MlaKvbView kv_b;                  // bf16 or fp8_block
  MlaCacheView cache;               // bf16 or fp8 e4m3, of kv_b's kv_lora_rank
  int layer = 0, group = 0;
  float kv_scale = 1.0f;            // fp8: value = stored * kv_scale; else unused
  void* scratch = nullptr;          // mla_prefill_scratch_bytes(kv_b, rope_dim, work.kv_rows)
  void* out = nullptr;              // [T, heads, v_dim] of out_type: o_proj's input (planned rows only)
  Precision out_type = Precision::bf16;
  // The attention kernel: 1 (mma.sync, any widths), 2 (wgmma, 64 query rows a block) or 3 (wgmma, 128 rows a block
  // in two warpgroups): 2 and 3 at nope 128, rope 64, v 128 only (other widths take 1). 0:
  // MOESERVE_MLA_PREFILL_ATTENTION=v2 or v3 asks for them, else kMlaPrefillAttentionDefault.
  int attention_version = 0;
};
// Versions 2 and 3 have not yet run on a GPU: version 1 stays the default until their tests pass there.
inline constexpr int kMlaPrefillAttentionDefault = 1;
// Whether versions 2 and 3 take these widths, and the version a launch with `params` runs.
bool mla_prefill_v2_fits(const MlaKvbView& kv_b, int rope_dim);
int mla_prefill_attention_version(const MlaPrefillParams& params);

// The expansion scratch: [kv_rows, heads, nope_dim + v_dim] bf16 (K_nope then V per head, kv_b's row order), then
// [kv_rows, rope_dim] bf16 (k_pe as stored: an fp8 cache's scale is applied to q_pe instead). DeepSeek-V3: 65,664
// bytes a context row.
size_t mla_prefill_scratch_bytes(const MlaKvbView& kv_b, int rope_dim, int64_t kv_rows);

// Why the kernels cannot run a shape (empty when they can): nope_dim and rope_dim multiples of 16 with
// nope_dim + rope_dim <= 192 (the score's k steps, 12 k16 slabs of query fragments held in registers), v_dim a
// multiple of 8 up to 128 (16 n8 tiles of output accumulators), kv_lora_rank a multiple of 16 equal to the cache's,
// the cache's rope_dim; kv_b bf16 or fp8_block (an fp32 kv_b belongs to the fp32 path, whose fp32 cache this
// bf16 tensor-core kernel does not read), the cache bf16 or fp8 e4m3.
std::string mla_prefill_shape_error(const MlaKvbView& kv_b, const MlaCacheView& cache);

// The expansion, then the attention, for the planned sequences: writes their query rows of `out`, no other. The
// step gives the block tables (step.block_tables, table_stride, num_groups); nothing else of it is read.
void launch_mla_prefill(cudaStream_t stream, const MlaPrefillParams& params, const MlaPrefillWork& work,
                        const StepView& step);
// Its two halves, for callers that time them apart (the same launches, in this order).
void launch_mla_prefill_expand(cudaStream_t stream, const MlaPrefillParams& params, const MlaPrefillWork& work,
                               const StepView& step);
void launch_mla_prefill_attention(cudaStream_t stream, const MlaPrefillParams& params, const MlaPrefillWork& work);

}  // namespace moeserve::cuda
