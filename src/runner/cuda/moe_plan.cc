#include "runner/cuda/moe_plan.h"

#include <algorithm>
#include <climits>
#include <string>

#include "util/error.h"

namespace moeserve::cuda {

const char* moe_path_name(MoePath path) {
  switch (path) {
    case MoePath::reference: return "reference";
    case MoePath::decode_x1: return "decode-x1";
    case MoePath::decode_x2: return "decode-x2";
    case MoePath::decode_wgmma_n16: return "decode-wgmma-n16";
    case MoePath::decode_wgmma_n32: return "decode-wgmma-n32";
    case MoePath::decode_wgmma_n64: return "decode-wgmma-n64";
    case MoePath::prefill_mma: return "prefill-mma";
    case MoePath::prefill_wgmma: return "prefill-wgmma";
  }
  return "";
}

MoePath parse_moe_path(std::string_view name) {
  std::string known;
  for (MoePath path : kMoePaths) {
    if (name == moe_path_name(path)) return path;
    known += known.empty() ? "" : ", ";
    known += moe_path_name(path);
  }
  fail("unknown MoE path \"{}\" (known: {})", name, known);
}

int moe_rows_per_tile(MoePath path) {
  switch (path) {
    case MoePath::reference:
    case MoePath::decode_x1: return 8;
    case MoePath::decode_x2: return 16;
    case MoePath::decode_wgmma_n16: return 16;
    case MoePath::decode_wgmma_n32: return 32;
    case MoePath::decode_wgmma_n64: return 64;
    case MoePath::prefill_mma:
    case MoePath::prefill_wgmma: return kMoePrefillTileRows;
  }
  return 8;
}

MoePath choose_moe_path(bool bf16, int64_t tokens, int top_k, int num_experts) {
  MOESERVE_CHECK(tokens >= 0 && top_k > 0 && num_experts > 0, "MoE path for {} tokens, top-{} of {} experts", tokens,
                 top_k, num_experts);
  if (!bf16) return MoePath::reference;
  const double per_expert = static_cast<double>(tokens) * top_k / num_experts;
  // The fastest path by rows per expert in moe_bench on an H200 (docs/PERF.md, 2026-12-01), uniform and Zipf
  // routing alike: the GEMV up to 24 (its 8- then 16-row tiles), the wgmma decode kernel's n32 / n64 tiles up to
  // 32 / 64 (each touched expert read once; their tensor rate grows with the tile's N), then the grouped GEMM
  // (version 3: 2,265 us at 64 rows against n64's 2,060, 2,556 at 128 against 3,991; measured at 1, 2, 4, ...,
  // 1,024 rows, the boundaries between the points interpolated).
  if (per_expert < 4) return MoePath::decode_x1;
  if (per_expert <= 24) return MoePath::decode_x2;
  if (per_expert <= 32) return MoePath::decode_wgmma_n32;
  if (per_expert <= 64) return MoePath::decode_wgmma_n64;
  return MoePath::prefill_wgmma;
}

int moe_max_tiles(int64_t rows, int rows_per_tile, int num_experts) {
  MOESERVE_CHECK(rows >= 0 && rows <= int64_t{1} << 40 && rows_per_tile > 0 && num_experts > 0,
                 "MoE tiles of {} rows for {} rows over {} experts", rows_per_tile, rows, num_experts);
  const int64_t tiles = (rows + rows_per_tile - 1) / rows_per_tile + std::min<int64_t>(num_experts, rows);
  MOESERVE_CHECK(tiles <= INT_MAX, "MoE grouping: {} rows make up to {} tiles of {} (at most {})", rows, tiles,
                 rows_per_tile, INT_MAX);
  return static_cast<int>(tiles);
}

namespace {

MoeGrid persistent_grid(const char* kernel, int64_t rows, int rows_per_tile, int64_t out_features,
                        int64_t in_features, int weight_rows, int num_experts, int multiprocessors) {
  MOESERVE_CHECK(multiprocessors > 0, "{}: {} multiprocessors", kernel, multiprocessors);
  MOESERVE_CHECK(out_features > 0 && out_features <= int64_t{1} << 24, "{}: out_features {}", kernel, out_features);
  MoeGrid grid;
  grid.weight_tiles = static_cast<int>((out_features + weight_rows - 1) / weight_rows);
  const int64_t items = static_cast<int64_t>(moe_max_tiles(rows, rows_per_tile, num_experts)) * grid.weight_tiles;
  MOESERVE_CHECK(items <= INT_MAX, "{}: {} rows x {} outputs make {} work items (at most {})", kernel, rows,
                 out_features, items, INT_MAX);
  grid.blocks = static_cast<int>(std::min<int64_t>(items, multiprocessors));
  MOESERVE_CHECK(in_features > 0 && in_features <= int64_t{1} << 24, "{}: in_features {}", kernel, in_features);
  const int64_t steps = grid.blocks == 0 ? 0 : (items + grid.blocks - 1) / grid.blocks * ((in_features + 63) / 64);
  MOESERVE_CHECK(steps <= INT_MAX, "{}: {} pipeline steps for one CTA (at most {})", kernel, steps, INT_MAX);
  return grid;
}

}  // namespace

MoeGrid moe_prefill_wgmma_grid(int64_t rows, int64_t out_features, int64_t in_features, int num_experts,
                               int multiprocessors) {
  return persistent_grid("moe_prefill_wgmma", rows, kMoePrefillTileRows, out_features, in_features,
                         kMoePrefillWgmmaTileN, num_experts, multiprocessors);
}

MoeGrid moe_decode_wgmma_grid(int64_t rows, int tile_rows, int64_t out_features, int64_t in_features,
                              int num_experts, int multiprocessors) {
  return persistent_grid("moe_decode_wgmma", rows, tile_rows, out_features, in_features, kMoeDecodeWgmmaWeightRows,
                         num_experts, multiprocessors);
}

void check_moe_gemm_shape(const char* kernel, int64_t rows, int64_t out_features, int64_t in_features,
                          int num_experts) {
  constexpr int64_t kMaxRows = int64_t{1} << 30, kMaxFeatures = int64_t{1} << 24;
  MOESERVE_CHECK(rows >= 0 && rows <= kMaxRows, "{}: {} grouped rows (0 to {})", kernel, rows, kMaxRows);
  MOESERVE_CHECK(num_experts >= 1 && num_experts <= 256, "{}: {} experts (1 to 256)", kernel, num_experts);
  MOESERVE_CHECK(out_features > 0 && out_features <= kMaxFeatures && out_features % 2 == 0,
                 "{}: out_features {} (even, 2 to {})", kernel, out_features, kMaxFeatures);
  MOESERVE_CHECK(in_features > 0 && in_features <= kMaxFeatures && in_features % 32 == 0,
                 "{}: in_features {} (a multiple of 32, up to {})", kernel, in_features, kMaxFeatures);
}

}  // namespace moeserve::cuda
