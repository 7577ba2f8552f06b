// Host-side planning of the MoE expert GEMMs (moe_*.cu): the kernels ("paths"), the grouping tile each expects,
// which one a step uses, the persistent kernels' grids, and the shape checks every launcher runs. Plain C++ with
// no CUDA, so that the CPU tests and the fuzz target cover it.
#pragma once

#include <cstdint>
#include <string_view>

namespace moeserve::cuda {

// reference: one thread per output, any precision (moe_reference.cu).
// decode_x1 / decode_x2: the tensor-core GEMV over 8- / 16-row tiles, each tile reading its expert (moe_decode.cu).
// decode_wgmma_n16 / _n32 / _n64: tiles of up to 16 / 32 / 64 rows x 512-row weight slices, each expert's weights
//   read once per step when its rows fit one tile (moe_decode_wgmma.cu).
// prefill_mma: the mma.sync grouped GEMM over 128-row tiles (moe_prefill.cu).
// prefill_wgmma: the warp-specialised wgmma grouped GEMM over 128-row tiles (moe_prefill_wgmma.cu).
enum class MoePath {
  reference,
  decode_x1,
  decode_x2,
  decode_wgmma_n16,
  decode_wgmma_n32,
  decode_wgmma_n64,
  prefill_mma,
  prefill_wgmma
};
inline constexpr MoePath kMoePaths[] = {MoePath::reference,        MoePath::decode_x1,        MoePath::decode_x2,
                                        MoePath::decode_wgmma_n16, MoePath::decode_wgmma_n32, MoePath::decode_wgmma_n64,
                                        MoePath::prefill_mma,      MoePath::prefill_wgmma};
const char* moe_path_name(MoePath path);
// The path of a name moe_path_name gives; throws naming the known ones otherwise.
MoePath parse_moe_path(std::string_view name);

inline constexpr int kMoePrefillTileRows = 128;        // both prefill paths
inline constexpr int kMoePrefillWgmmaTileN = 192;      // weight rows of a prefill_wgmma item (wgmma n192; divides
                                                       // gpt-oss's 5,760 and 2,880, where 256 would waste 2% / 6%)
inline constexpr int kMoeDecodeWgmmaWeightRows = 512;  // weight rows of a decode_wgmma item

// Rows of the grouping's tiles (launch_group_by_expert's rows_per_tile) the path expects.
int moe_rows_per_tile(MoePath path);

// The path for a step of `tokens` tokens with top-k of `num_experts`, by the mean rows per expert r = tokens k / E
// (bf16; fp32 steps use the reference), from moe_bench's measurements on an H200 (docs/PERF.md): decode_x1 for
// r < 4, decode_x2 up to 24, decode_wgmma_n32 up to 32, decode_wgmma_n64 up to 64, prefill_wgmma beyond.
// decode_wgmma_n16 and prefill_mma won at no measured point and are kept for moe_bench's comparison only.
MoePath choose_moe_path(bool bf16, int64_t tokens, int top_k, int num_experts);

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
MoeGrid moe_decode_wgmma_grid(int64_t rows, int tile_rows, int64_t out_features, int64_t in_features,
                              int num_experts, int multiprocessors);

// Throws moeserve::Error naming `kernel` and the bad value unless 0 <= rows <= 2^30, 1 <= num_experts <= 256,
// 0 < out_features <= 2^24 and even (SwiGLU pairs; the epilogues store pairs), 0 < in_features <= 2^24 and a
// multiple of 32 (MXFP4 blocks).
void check_moe_gemm_shape(const char* kernel, int64_t rows, int64_t out_features, int64_t in_features,
                          int num_experts);

}  // namespace moeserve::cuda
