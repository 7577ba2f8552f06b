// Host-side planning of the MoE expert GEMMs (moe_*.cu): the kernels ("paths"), the grouping tile each expects,
// which one a step uses, the persistent kernels' grids, and the shape checks every launcher runs. Plain C++ with
// no CUDA, so that the CPU tests and the fuzz target cover it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runner/cuda/host_device.h"

namespace moeserve::cuda {

// reference: one thread per output, any precision (moe_reference.cu).
// decode_x1 / decode_x2: the tensor-core GEMV over 8- / 16-row tiles, each tile reading its expert (moe_decode.cu).
// decode_wgmma_n16 / _n32 / _n64: tiles of up to 16 / 32 / 64 rows x 512-row weight slices, each expert's weights
//   read once per step when its rows fit one tile (moe_decode_wgmma.cu).
// wgmma_rs_n128: the same kernel (weights dequantised in registers as wgmma's A operand) with prefill-sized tiles:
//   128 rows x 256-row weight slices, so that a weight value's conversion serves 128 tokens (moe_decode_wgmma.cu).
// decode_mma_n8 / _n16 / _n32 / _n64: tiles of up to 8 / 16 / 32 / 64 rows x 256-row weight slices, mma.sync with
//   the weights dequantised in registers and the tile's activations shared through shared memory; each expert's
//   weights read once per step when its rows fit one tile (moe_decode_mma.cu).
// decode_mma_mixed: decode_mma with each expert's tile width (8, 16 or 32 rows) chosen on the device by that
//   expert's own row count (MoeMixedBounds), one launch for all widths: skewed routing's hot experts get wide tiles
//   and the cold ones narrow tiles in the same step, where the other paths pick one width by the mean.
// prefill_mma: the mma.sync grouped GEMM over 128-row tiles (moe_prefill.cu).
// prefill_wgmma: the warp-specialised wgmma grouped GEMM over 128-row tiles (moe_prefill_wgmma.cu).
// prefill_wgmma_m256: the same kernel over 256-row tiles x 128 weight rows (bf16 only), so that each weight value
//   the producers dequantise serves 256 rows of MACs instead of 128. 2-6% faster than prefill_wgmma at 256-1,024
//   evenly spread rows per expert, slower under skewed routing and end to end (docs/PERF.md): kept for moe_bench.
// prefill_wgmma_deep: prefill_wgmma with its producers' raw weight copies four own steps ahead instead of two (bf16
//   only). Built 2026-12-07 against the producers' L1TEX stalls; 1-2% slower on an H200 (docs/PERF.md), so the
//   built-in choice keeps prefill_wgmma.
// prefill_wgmma_split: prefill_wgmma over each expert's whole 128-row tiles, and decode_mma's 32-row tiles over the
//   rest of an expert's rows when they are few (at most MoeMixedBounds::split_max: the split grouping,
//   kMoeSplitTileRows). A 128-row tile costs the grouped GEMM the same whatever its rows (its producers dequantise
//   the whole weight tile), so an expert's last tile of a few rows, and a cold expert's only one, cost it as much as
//   a full tile; decode_mma's 32-row tiles cost about a third of that. Skewed routing makes many such tiles. The
//   built-in choice for prefill-sized steps since 2026-12-07 (docs/PERF.md).
// prefill_wgmma_hot: prefill_wgmma_split whose hot experts (at least MoeHotWeights::min_rows rows this step, the
//   first `slots` of them in expert order) are dequantised once per launch into a scratch of ready shared-memory
//   B tiles (launch_moe_hot_convert), which the grouped GEMM's producers then copy instead of converting: a 128-row
//   tile of a hot expert costs its producers two cp.async copies a stage. Skewed routing puts most rows in a few
//   experts (the synthetic router's 1 x 8k step: 7 experts of 128 hold 58% of the rows), whose weights the plain
//   path dequantises once per 128-row tile (40 times for 5,000 rows). The built-in choice for prefill-sized steps with
//   FP8 activations since 2026-12-07 (5-6% faster prefill on an H100); with bf16 activations 4% slower (the ready bf16
//   tiles are 4x the MXFP4 blocks' bytes: 40 KB a 64-k stage for ~3.1 MFLOP, ~5.8 TB/s from L2 at 450 TFLOP/s).
enum class MoePath {
  reference,
  decode_x1,
  decode_x2,
  decode_wgmma_n16,
  decode_wgmma_n32,
  decode_wgmma_n64,
  wgmma_rs_n128,
  decode_mma_n8,
  decode_mma_n16,
  decode_mma_n32,
  decode_mma_n64,
  decode_mma_mixed,
  prefill_mma,
  prefill_wgmma,
  prefill_wgmma_m256,
  prefill_wgmma_deep,
  prefill_wgmma_split,
  prefill_wgmma_hot
};
inline constexpr MoePath kMoePaths[] = {
    MoePath::reference,      MoePath::decode_x1,      MoePath::decode_x2,      MoePath::decode_wgmma_n16,
    MoePath::decode_wgmma_n32, MoePath::decode_wgmma_n64, MoePath::wgmma_rs_n128,  MoePath::decode_mma_n8,
    MoePath::decode_mma_n16, MoePath::decode_mma_n32, MoePath::decode_mma_n64, MoePath::decode_mma_mixed,
    MoePath::prefill_mma,    MoePath::prefill_wgmma,  MoePath::prefill_wgmma_m256, MoePath::prefill_wgmma_deep,
    MoePath::prefill_wgmma_split, MoePath::prefill_wgmma_hot};
const char* moe_path_name(MoePath path);
// The paths that take FP8 (e4m3) activations (--activation-dtype fp8): the decode_mma ones (m16n8k32 e4m3 with the
// block scales applied to the fp32 products) and prefill_wgmma (wgmma k32 e4m3 with the block scales folded into
// the weights' e4m3 exponents, moe_layout.h); the others stay bf16.
constexpr bool moe_path_takes_fp8(MoePath path) {
  return path == MoePath::decode_mma_n8 || path == MoePath::decode_mma_n16 || path == MoePath::decode_mma_n32 ||
         path == MoePath::decode_mma_n64 || path == MoePath::decode_mma_mixed || path == MoePath::prefill_wgmma ||
         path == MoePath::prefill_wgmma_split || path == MoePath::prefill_wgmma_hot;
}
// The paths whose second projection can write bf16 rows (MoeGemmParams::out_bf16): the wgmma grouped GEMM's (plain,
// m256, deep, split, hot) and decode_mma's (the split paths' narrow tiles), whose epilogues store either.
constexpr bool moe_path_writes_bf16(MoePath path) {
  return path == MoePath::decode_mma_n8 || path == MoePath::decode_mma_n16 || path == MoePath::decode_mma_n32 ||
         path == MoePath::decode_mma_n64 || path == MoePath::decode_mma_mixed || path == MoePath::prefill_wgmma ||
         path == MoePath::prefill_wgmma_m256 || path == MoePath::prefill_wgmma_deep ||
         path == MoePath::prefill_wgmma_split || path == MoePath::prefill_wgmma_hot;
}
// The path of a name moe_path_name gives; throws naming the known ones otherwise.
MoePath parse_moe_path(std::string_view name);

inline constexpr int kMoePrefillTileRows = 128;        // both prefill paths
inline constexpr int kMoePrefillM256TileRows = 256;    // prefill_wgmma_m256's tiles
inline constexpr int kMoePrefillM256TileN = 128;       // its weight rows an item (n128: 5,760 / 45, 2,880 / 22.5)
inline constexpr int kMoePrefillWgmmaTileN = 192;      // weight rows of a prefill_wgmma item (wgmma n192; divides
                                                       // gpt-oss's 5,760 and 2,880, where 256 would waste 2% / 6%)
inline constexpr int kMoeDecodeWgmmaWeightRows = 512;  // weight rows of a decode_wgmma item (16-64-row tiles)
inline constexpr int kMoeWgmmaRsWeightRows = 256;      // weight rows of a wgmma_rs_n128 item (128-row tiles)
// The weight rows of one item of moe_decode_wgmma.cu's kernel for tiles of `tile_rows` (16, 32, 64 or 128).
constexpr int moe_decode_wgmma_weight_rows(int tile_rows) {
  return tile_rows == 128 ? kMoeWgmmaRsWeightRows : kMoeDecodeWgmmaWeightRows;
}
inline constexpr int kMoeDecodeMmaWeightRows = 256;    // weight rows of a decode_mma CTA

// Rows of the grouping's tiles (launch_group_by_expert's rows_per_tile) the path expects; kMoeMixedTileRows for
// decode_mma_mixed, whose tiles' widths the grouping chooses per expert.
inline constexpr int kMoeMixedTileRows = 0;
int moe_rows_per_tile(MoePath path);

// decode_mma_mixed's widths by an expert's rows r: 8-row tiles for r <= n8_max, 16-row tiles for r <= n16_max,
// 32-row tiles beyond (ceil(r / width) tiles each). split_max: the split grouping's bound (prefill_wgmma_split, below).
inline constexpr int kMoeSplitMaxDefault = 64;
struct MoeMixedBounds {
  int n8_max = 8;
  int n16_max = 16;
  int split_max = kMoeSplitMaxDefault;
};
// The class decode_mma_mixed's grouping puts an expert of `rows` rows in (0, 1, 2: the 32-, 16- and 8-row tiles,
// listed in that order), and that class's tile rows: the device scan's rule, shared with the launches and tests.
MOESERVE_HD constexpr int moe_mixed_tile_class(int rows, const MoeMixedBounds& b) {
  return rows <= b.n8_max ? 2 : rows <= b.n16_max ? 1 : 0;
}
MOESERVE_HD constexpr int moe_mixed_class_rows(int cls) { return 32 >> cls; }
MOESERVE_HD constexpr int moe_mixed_tile_rows(int rows, const MoeMixedBounds& b) {
  return moe_mixed_class_rows(moe_mixed_tile_class(rows, b));
}
// The split grouping (rows_per_tile kMoeSplitTileRows, prefill_wgmma_split): an expert of `rows` rows has
// rows / 128 whole tiles of 128 rows (class 0), and its remaining rows % 128 go to 32-row tiles (class 1) when there
// are at most split_max (0 <= split_max <= 127) of them, else to one more 128-row tile (class 0). The list holds the
// 128-row tiles first, each class's count in num_tiles[1 + class]. Rows of the expert in 32-row tiles:
inline constexpr int kMoeSplitTileRows = -1;
inline constexpr int kMoeSplitSmallTileRows = 32;
MOESERVE_HD constexpr int moe_split_small_rows(int rows, int split_max) {
  const int rest = rows % kMoePrefillTileRows;
  return rest <= split_max ? rest : 0;
}
// The split grouping's tiles of class `cls` (0: 128 rows, 1: 32 rows) for an expert of `rows` rows.
MOESERVE_HD constexpr int moe_split_tiles(int rows, int split_max, int cls) {
  const int small = moe_split_small_rows(rows, split_max);
  return cls == 0 ? (rows - small + kMoePrefillTileRows - 1) / kMoePrefillTileRows
                  : (small + kMoeSplitSmallTileRows - 1) / kMoeSplitSmallTileRows;
}
// At most this many tiles of split class `cls` for `rows` grouped rows over `num_experts` experts. Throws on a bad
// class or bound.
int moe_split_class_max_tiles(int64_t rows, int cls, int split_max, int num_experts);

// prefill_wgmma_hot's scratch: `slots` experts' weights as ready B tiles of the grouped GEMM, each tile 192 weight
// rows x one 64-k step (bf16) or 128-k step (e4m3) in its 128-byte-swizzled shared-memory image (24,576 bytes), tiles
// in (weight tile, k step) order. Its bytes for one projection of out_features x in_features; throws on a bad count.
// Defaults: 8 slots (8 x 33 MB for gpt-oss's first projection in bf16) and 1,024 rows, where one tile of dequantised
// weights serves 8 row tiles (docs/PERF.md).
inline constexpr int kMoeHotSlotsDefault = 8;
inline constexpr int kMoeHotMinRowsDefault = 1024;
inline constexpr int kMoeHotMaxSlots = 127;
int64_t moe_hot_bytes(int slots, int64_t out_features, int64_t in_features, bool fp8);

// At most this many tiles of mixed class `cls` (0, 1, 2: the 32-, 16- and 8-row tiles) for `rows` grouped rows over
// `num_experts` experts: an expert in class 2 has at most n8_max rows, one in class 1 more than n8_max and at most
// n16_max, one in class 0 more than n16_max. Throws on a bad class or bounds.
int moe_mixed_class_max_tiles(int64_t rows, int cls, const MoeMixedBounds& bounds, int num_experts);
// "N8:N16" (moe_bench's --mixed-bounds): 1 <= N8 <= N16 <= 4096. Throws naming the bad text.
MoeMixedBounds parse_moe_mixed_bounds(std::string_view text);

// The path for a step of `tokens` tokens with top-k of `num_experts`, by the mean rows per expert r = tokens k / E
// (bf16; fp32 steps use the reference), from moe_bench's and cuda_bench's measurements (docs/PERF.md): decode_x1 for
// fewer than 8 grouped rows (tokens k), decode_mma_n8 up to r = 4.5, n16 up to 8, decode_mma_mixed up to 39.2, n64 up to
// 90.5, prefill_wgmma_split beyond.
// decode_x2, the decode_wgmma tiles, decode_mma_n32 and prefill_mma win at no measured point of the built-in choice
// and are kept for moe_bench's comparison.
// A table given by the user replaces the built-in choice (moeserve's --moe-path-table, for benchmarking kernels
// end to end): rule i's path serves mean rows per expert up to its bound, the last rule all the rest.
struct MoePathRule {
  double max_rows_per_expert = 0;  // the last rule's is +infinity
  MoePath path = MoePath::reference;
};
using MoePathTable = std::vector<MoePathRule>;
// fp8_activations (--activation-dtype fp8): prefill_wgmma_hot where the built-in choice takes prefill_wgmma_split
// (measured faster with e4m3 activations and slower with bf16 ones, docs/PERF.md); a given table is taken as it is.
MoePath choose_moe_path(bool bf16, int64_t tokens, int top_k, int num_experts, const MoePathTable& table = {},
                        bool fp8_activations = false);
// "PATH:MAX,PATH:MAX,...,PATH": bounds positive, finite and increasing, the last entry without one, the reference
// path not among them (it is the fp32 path). Throws naming the bad entry.
MoePathTable parse_moe_path_table(std::string_view text);

// At most this many tiles of `rows_per_tile` rows for `rows` grouped rows over `num_experts` experts: every
// expert with rows adds at most one partial tile, and at most min(E, rows) experts have rows. Throws when the
// count does not fit an int (the tile list is indexed by int).
int moe_max_tiles(int64_t rows, int rows_per_tile, int num_experts);

// The persistent kernels' grid: one CTA per SM at most (each holds ~200 KB of shared memory), and the number of
// weight tiles (prefill_wgmma) or slices (decode_wgmma) per row tile.
struct MoeGrid {
  int blocks = 0;
  int weight_tiles = 0;
};
// Throws when a CTA's count of 64-k steps (its items x in_features / 64) would not fit an int.
MoeGrid moe_prefill_wgmma_grid(int64_t rows, int64_t out_features, int64_t in_features, int num_experts,
                               int multiprocessors);
MoeGrid moe_prefill_wgmma_m256_grid(int64_t rows, int64_t out_features, int64_t in_features, int num_experts,
                                    int multiprocessors);
MoeGrid moe_decode_wgmma_grid(int64_t rows, int tile_rows, int64_t out_features, int64_t in_features,
                              int num_experts, int multiprocessors);

// decode_mma's grid (not persistent): weight_tiles = 256-row slices of out_features (grid x), blocks = the grouping's
// tile bound (grid y, at most 65,535: throws beyond). Throws too when an expert's MXFP4 blocks reach 2^31 bytes
// (the kernel's 32-bit offsets).
MoeGrid moe_decode_mma_grid(int64_t rows, int tile_rows, int64_t out_features, int64_t in_features, int num_experts);

// Throws moeserve::Error naming `kernel` and the bad value unless 0 <= rows <= 2^30, 1 <= num_experts <= 256,
// 0 < out_features <= 2^24 and even (SwiGLU pairs; the epilogues store pairs), 0 < in_features <= 2^24 and a
// multiple of 32 (MXFP4 blocks).
void check_moe_gemm_shape(const char* kernel, int64_t rows, int64_t out_features, int64_t in_features,
                          int num_experts);

}  // namespace moeserve::cuda
