// The paged latent cache of multi-head latent attention (DeepSeek-V2/V3 MLA), the host-side plan of its decode
// kernel (mla_cache_write.cu, mla_decode.cu) and the choice between that absorbed form and the expanded-form prefill
// (mla_prefill.h) for a sequence's query tokens. Plain C++ callable on the host and the device, so that the CPU tests
// (tests/runner/mla_layout_test.cc) check the same addressing and choices the kernels use.
//
// Cache layout: [block][layer][block_size rows][kv_lora_rank + rope_dim] elements of the cache's type (bf16, or fp8
// e4m3 with one scale per layer: value = stored * scale; f32 for the cache write only). A row is one token's
// latent for one layer: the RMS-normed latent c (kv_lora_rank values), then the rotated shared rope key k_pe
// (rope_dim values), as cpu::MlaAttention keeps it; 576 values for DeepSeek-V3 (1,152 bytes in bf16, 576 in fp8).
// A layer's rows of a block are contiguous (block_size * width elements), so the decode kernel's 16-byte copies of
// one key range run along whole rows. Token position p of a sequence lives in row p % block_size of block
// table[p / block_size].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runner/cuda/host_device.h"

namespace moeserve::cuda {

struct MlaCacheShape {
  int kv_lora_rank = 0;  // latent values per token (DeepSeek-V3: 512)
  int rope_dim = 0;      // qk_rope_head_dim (DeepSeek-V3: 64)
  int block_size = 0;    // tokens per block (the runners' 16)
  int layers = 0;        // layers per block
};

MOESERVE_HD int mla_row_width(const MlaCacheShape& s) { return s.kv_lora_rank + s.rope_dim; }
MOESERVE_HD int64_t mla_block_elements(const MlaCacheShape& s) {
  return static_cast<int64_t>(s.layers) * s.block_size * mla_row_width(s);
}
// Element offset of row `row` (0 .. block_size - 1) of layer `layer` in pool block `block`.
MOESERVE_HD int64_t mla_row_offset(const MlaCacheShape& s, int32_t block, int layer, int row) {
  return ((static_cast<int64_t>(block) * s.layers + layer) * s.block_size + row) * mla_row_width(s);
}
// The same for a sequence's position through its block table, or -1 where the table has no block.
MOESERVE_HD int64_t mla_position_offset(const MlaCacheShape& s, const int32_t* table, int layer, int position) {
  const int32_t block = table[position / s.block_size];
  if (block < 0) return -1;
  return mla_row_offset(s, block, layer, position % s.block_size);
}

// ---- the decode kernel's plan -----------------------------------------------------------------------------------
// A block of the decode kernel takes one query token and one key range of split_keys positions (a "split"): it
// copies the range's latent rows into shared memory once, then computes every head's scores, softmax and output
// over them, writing a partial (max, sum, output) per (token, head, split); a merge kernel combines the splits.
// Two versions with the same plan, partials and merge: version 1 (mla_decode.cu) on CUDA cores in fp32, walking
// the heads kMlaHeadsPerPass at a time; version 2 (mla_decode_mma.cu) on tensor cores (mma.sync, bf16 operands,
// fp32 accumulators), 128 heads a block, 16 a warp.
enum class MlaDecodeVersion { v1, v2 };
// The version launch_mla_decode runs when MOESERVE_MLA_DECODE is unset: version 2, which builds cleanly for sm_90a
// without spills (mla_decode_mma.cu's header counts its registers); MOESERVE_MLA_DECODE=v1 runs the fp32 kernel,
// the tests' second oracle.
inline constexpr MlaDecodeVersion kMlaDecodeDefault = MlaDecodeVersion::v2;
// The version a name stands for ("v1" or "v2", MOESERVE_MLA_DECODE's values and mla_bench's --version); false for
// any other name.
inline bool mla_decode_version_named(std::string_view name, MlaDecodeVersion& version) {
  if (name != "v1" && name != "v2") return false;
  version = name == "v1" ? MlaDecodeVersion::v1 : MlaDecodeVersion::v2;
  return true;
}
inline const char* mla_decode_version_name(MlaDecodeVersion version) {
  return version == MlaDecodeVersion::v1 ? "v1" : "v2";
}

inline constexpr int kMlaHeadsPerPass = 8;   // one warp per head for the softmax
inline constexpr int kMlaDecodeThreads = 256;
inline constexpr int kMlaMaxSplitKeys = 64;  // 64 V3 rows in bf16: 74 KB of shared memory
inline constexpr int kMlaMaxSharedBytes = 227 * 1024;  // Hopper's opt-in dynamic shared memory per block

// Shared memory of one decode block: the key range's rows as 16-bit values (width + 2 per row: an odd number of
// words, so 32 lanes reading one column of 32 rows hit 32 banks), the pass's queries in fp32 (width + 4 per row),
// and the pass's scores.
MOESERVE_HD int mla_decode_shared_bytes(int width, int split_keys) {
  return split_keys * (width + 2) * 2 + kMlaHeadsPerPass * (width + 4) * 4 + kMlaHeadsPerPass * split_keys * 4;
}
// Version 2's: the key range's rows as bf16 with 16 bytes of pad each (2 width + 16 bytes, an odd number of 16-byte
// units when width % 16 == 0: ldmatrix's 8 rows at one column hit 8 different bank groups), and for an fp8 cache
// the rows as stored (width bytes each), where the copies land before they are widened to bf16.
MOESERVE_HD int mla_decode_mma_shared_bytes(int width, int split_keys, int element_bytes) {
  return split_keys * (2 * width + 16) + (element_bytes == 1 ? split_keys * width : 0);
}

// Splits of one query token whose last visible position is `last`.
MOESERVE_HD int mla_decode_splits(int last, int split_keys) { return last / split_keys + 1; }

// The key range per split: the largest of 64, 32, 16 whose (query tokens x splits of the longest context) fill
// two waves of blocks on the GPU (two blocks fit per multiprocessor at V3's width), else 16. Fewer keys per
// split mean more partial outputs (heads x kv_lora_rank floats each) written and merged.
inline int mla_decode_split_keys(int query_tokens, int max_context, int multiprocessors) {
  for (int keys = kMlaMaxSplitKeys; keys > 16; keys /= 2) {
    const int64_t blocks = static_cast<int64_t>(query_tokens) * ((max_context + keys - 1) / keys);
    if (blocks >= 2 * static_cast<int64_t>(multiprocessors)) return keys;
  }
  return 16;
}

// Partial floats: [query tokens][heads][max_splits][2 + kv_lora_rank] (max and sum in the log2 domain, then the
// unnormalised output).
MOESERVE_HD int mla_partial_stride(int kv_lora_rank) { return 2 + kv_lora_rank; }
inline size_t mla_decode_partial_floats(int query_tokens, int heads, int kv_lora_rank, int max_splits) {
  return static_cast<size_t>(query_tokens) * heads * max_splits * mla_partial_stride(kv_lora_rank);
}

// The merge kernel's dynamic shared memory: one weight per split, rounded up to whole groups of four floats.
// Its loop over the splits reads weight[] in 16-byte-aligned groups of four (the compiler vectorises it), and the
// tail after the last whole group, splits % 4 weights, may be read as one wider load from the group's start: the
// first GPU run's memcheck caught a 12-byte read at weight[156] of a 157-float array (max_splits 157). So the array
// reaches the end of the last group, and the kernel zeroes the pad.
MOESERVE_HD int mla_merge_weight_floats(int splits) { return (splits + 3) / 4 * 4; }
inline constexpr int kMlaMaxMergeSharedBytes = 47 * 1024;  // 48 KB without opting in, less 1 KB for its static arrays
inline int mla_merge_shared_bytes(int max_splits) {
  return mla_merge_weight_floats(max_splits) * static_cast<int>(sizeof(float));
}
// Why a scratch's max_splits cannot be merged (empty when it can).
inline std::string mla_merge_error(int max_splits) {
  if (max_splits < 1 || max_splits > kMlaMaxMergeSharedBytes / static_cast<int>(sizeof(float)))
    return "MLA decode: max_splits must be 1 to 12,032 (the merge kernel's weights in 47 KB of shared memory)";
  return {};
}

// Why the kernels cannot run a shape (empty when they can): rows move in 16-byte copies (width * element_bytes a
// multiple of 16), the rope part rotates in pairs and the output goes in column pairs, and a split's rows must fit
// in shared memory. Version 2 takes [q~, q_pe] in k steps of 16 that each stay inside one of the two, and writes
// the output in tiles of 16 columns: kv_lora_rank and rope_dim multiples of 16.
inline std::string mla_shape_error(const MlaCacheShape& s, int element_bytes, int heads, int split_keys,
                                   MlaDecodeVersion version) {
  const int width = mla_row_width(s);
  if (s.kv_lora_rank <= 0 || s.rope_dim <= 0 || s.block_size <= 0 || s.layers <= 0 || heads <= 0)
    return "MLA shape: kv_lora_rank, rope_dim, block_size, layers and heads must be positive";
  if (s.rope_dim % 2 != 0 || s.kv_lora_rank % 2 != 0) return "MLA shape: kv_lora_rank and rope_dim must be even";
  if (width * element_bytes % 16 != 0)
    return "MLA shape: a cache row (kv_lora_rank + rope_dim elements) must be a multiple of 16 bytes";
  if (split_keys < 16 || split_keys > kMlaMaxSplitKeys || split_keys % 16 != 0)
    return "MLA decode: split_keys must be 16, 32, 48 or 64";
  const bool v1 = version == MlaDecodeVersion::v1;
  if (!v1 && (s.kv_lora_rank % 16 != 0 || s.rope_dim % 16 != 0))
    return "MLA decode v2: kv_lora_rank and rope_dim must be multiples of 16";
  const int bytes = v1 ? mla_decode_shared_bytes(width, split_keys)
                       : mla_decode_mma_shared_bytes(width, split_keys, element_bytes);
  if (bytes > kMlaMaxSharedBytes)
    return "MLA decode: a split's rows do not fit in shared memory (kv_lora_rank + rope_dim too large)";
  return {};
}

// ---- the absorbed or the expanded form ------------------------------------------------------------------------------
// Whether a sequence whose step brings q_len query tokens, `context` tokens in all once the step's are cached, runs
// its attention in the expanded form (mla_prefill.h) rather than the absorbed one (launch_mla_absorb, decode,
// unabsorb), counting multiply-adds per head with L = kv_lora_rank, n = nope_dim, v = v_dim, r = rope_dim:
//   - the expanded form expands every context row through kv_b, L (n + v) a row, context rows; the absorbed form
//     turns every query into the latent space and its output back, L n + L v, q_len queries: the same cost a row,
//     so the expanded form pays (context - q_len) L (n + v) more;
//   - a (query, visible key) pair costs (n + r) + v expanded against (L + r) + L absorbed, 2L - n - v less; query
//     i of the step (position context - q_len + i) sees context - q_len + i + 1 keys, q_len (context - (q_len - 1)
//     / 2) pairs in all.
// So the expanded form pays when (context - q_len) L (n + v) < (2L - n - v) q_len (context - (q_len - 1) / 2),
// computed here times 2 in integers. DeepSeek-V3 (L 512, n 128, v 128): (context - q_len) x 170.7 < the pairs, the
// kernel's author's rule with 171: a whole prompt always, a decode token never, a chunk of 64 after at most 19
// cached tokens, of 512 after 3,584 easily. The tiny test model (L 144, n 32, v 40): 48. Widths with 2L <= n + v
// never pay. FLOPs only, as mla_prefill.cu's header counts them: the kernels' speeds are left out.
inline bool mla_prefill_pays(int context, int q_len, int kv_lora_rank, int nope_dim, int v_dim) {
  const int64_t expansion = 2 * static_cast<int64_t>(context - q_len) * kv_lora_rank * (nope_dim + v_dim);
  const int64_t pair_saving = 2 * static_cast<int64_t>(kv_lora_rank) - nope_dim - v_dim;
  return expansion < pair_saving * q_len * (2 * static_cast<int64_t>(context) - q_len + 1);
}

}  // namespace moeserve::cuda
