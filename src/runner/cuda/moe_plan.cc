#include "runner/cuda/moe_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>

#include "util/parse.h"

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
    case MoePath::wgmma_rs_n128: return "wgmma-rs-n128";
    case MoePath::decode_mma_n8: return "decode-mma-n8";
    case MoePath::decode_mma_n16: return "decode-mma-n16";
    case MoePath::decode_mma_n32: return "decode-mma-n32";
    case MoePath::decode_mma_n64: return "decode-mma-n64";
    case MoePath::decode_mma_mixed: return "decode-mma-mixed";
    case MoePath::prefill_mma: return "prefill-mma";
    case MoePath::prefill_wgmma: return "prefill-wgmma";
    case MoePath::prefill_wgmma_m256: return "prefill-wgmma-m256";
    case MoePath::prefill_wgmma_deep: return "prefill-wgmma-deep";
    case MoePath::prefill_wgmma_split: return "prefill-wgmma-split";
    case MoePath::prefill_wgmma_hot: return "prefill-wgmma-hot";
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
    case MoePath::wgmma_rs_n128: return 128;
    case MoePath::decode_mma_n8: return 8;
    case MoePath::decode_mma_n16: return 16;
    case MoePath::decode_mma_n32: return 32;
    case MoePath::decode_mma_n64: return 64;
    case MoePath::decode_mma_mixed: return kMoeMixedTileRows;
    case MoePath::prefill_mma:
    case MoePath::prefill_wgmma:
    case MoePath::prefill_wgmma_deep: return kMoePrefillTileRows;
    case MoePath::prefill_wgmma_m256: return kMoePrefillM256TileRows;
    case MoePath::prefill_wgmma_split:
    case MoePath::prefill_wgmma_hot: return kMoeSplitTileRows;
  }
  return 8;
}

MoePath choose_moe_path(bool bf16, int64_t tokens, int top_k, int num_experts, const MoePathTable& table,
                        bool fp8_activations) {
  MOESERVE_CHECK(tokens >= 0 && top_k > 0 && num_experts > 0, "MoE path for {} tokens, top-{} of {} experts", tokens,
                 top_k, num_experts);
  if (!bf16) return MoePath::reference;
  const double per_expert = static_cast<double>(tokens) * top_k / num_experts;
  for (const MoePathRule& rule : table)
    if (per_expert <= rule.max_rows_per_expert) return rule.path;
  // The fastest path by rows per expert in moe_bench on an H200 (docs/PERF.md, 2026-12-01, decode_mma's first
  // version; benchmarks/cuda/moe_path_table.py draws the bounds from a run): the GEMV below one row per expert
  // (batch 1 touches 4 of 128 experts, too few 256-row slices to fill the GPU), then decode_mma's 8-, 16-, 32- and
  // 64-row tiles, the grouped GEMM beyond 90 rows. n16 takes over from n8 at 4.5 rows rather than where uniform
  // routing would put it (11): at 5 and 8 rows n8 is 9% faster with uniform routing and n16 15% faster with
  // Zipf's, and real routing is skewed.
  // From 8 rows up decode_mma_mixed, each expert's width by its own count (2026-12-02: 1.2-7.6% faster than the
  // single width where routing spreads the counts, Zipf's at 16-32 rows in moe_bench and the synthetic router's at
  // batch 384 in cuda_bench; 2-3% slower with exactly equal counts, where its two empty launches are pure cost).
  // The GEMV's bound moved from 1 to 0.2 rows per expert on 2026-12-02 (cuda_bench at 2k context, the same binary
  // with both choices): decode_mma_n8 took batch 8 (0.25 rows) from 935 to 966 tokens/s and batch 16 (0.5) from
  // 1,258 to 1,431; at batch 1 (0.03: 4 experts, too few 256-row slices for 132 SMs) the GEMV stays. Batches 2-7
  // were not measured; 0.2 kept the GEMV up to batch 6 of gpt-oss-120b. With the tiled weights (2026-12-06, an H100,
  // cuda_bench at 2k context, both choices in one call) decode_mma_n8 streams at 92-95% of the copy rate and took
  // batch 2 (8 grouped rows) from 425 to 436 tokens/s and batch 4 from 599 to 624, while batch 1 (4 rows: 4 experts'
  // 90 slices of 256 rows for 132 SMs) lost, 263 -> 250. What decides is how many experts' slices there are, not
  // the mean, so the GEMV now serves steps of fewer than 8 grouped rows (batch 1 at top-4, of any expert count).
  if (tokens * top_k < 8) return MoePath::decode_x1;
  if (per_expert <= 4.5) return MoePath::decode_mma_n8;
  if (per_expert <= 8) return MoePath::decode_mma_n16;
  if (per_expert <= 39.2) return MoePath::decode_mma_mixed;
  if (per_expert <= 90.5) return MoePath::decode_mma_n64;
  // Beyond, the grouped GEMM over whole 128-row tiles with each expert's last few rows on decode_mma's 32-row tiles
  // (2026-12-07, an H100, one binary, both choices in one call): cuda_bench prefill 1 x 8k 32,005 -> 34,014 tokens/s
  // (the synthetic router's 1 x 8k step: 80 of 128 experts below 128 rows, 333 tiles for 256 tiles' worth of rows),
  // 16 x 1k 37,581 -> 38,569; moe_bench 3-11% faster under Zipf routing, within 1% at equal counts.
  // With FP8 activations, the same with the hot experts dequantised once a launch (2026-12-07, an H100, one binary,
  // both choices alternating in two calls): cuda_bench prefill 1 x 8k 35,302-35,517 -> 37,101-37,602 tokens/s,
  // 16 x 1k 41,580 -> 43,783; moe_bench 6-9% faster under Zipf routing (hot from 1,024 rows), 3% slower to 1%
  // faster at equal counts (two calls). Not with bf16 activations: there the ready bf16 tiles' bytes (4x the MXFP4
  // blocks') made it 4% slower end to end.
  return fp8_activations ? MoePath::prefill_wgmma_hot : MoePath::prefill_wgmma_split;
}

MoePathTable parse_moe_path_table(std::string_view text) {
  MoePathTable table;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = text.substr(start, comma - start);
    const bool last = comma == text.size();
    const size_t colon = entry.find(':');
    MoePathRule rule;
    try {
      rule.path = parse_moe_path(entry.substr(0, colon));
    } catch (const Error& e) {
      fail("--moe-path-table entry \"{}\": {}", entry, e.what());
    }
    MOESERVE_CHECK(rule.path != MoePath::reference, "--moe-path-table entry \"{}\": the reference path is the "
                   "fp32 one, not a bf16 choice", entry);
    if (colon == std::string_view::npos) {
      MOESERVE_CHECK(last, "--moe-path-table entry \"{}\" has no bound (PATH:MAX; only the last entry has none)",
                     entry);
      rule.max_rows_per_expert = std::numeric_limits<double>::infinity();
    } else {
      const std::string number(entry.substr(colon + 1));
      size_t used = 0;
      const std::optional<double> bound = parse_double_prefix(number, used);
      MOESERVE_CHECK(bound && used == number.size() && std::isfinite(*bound) && *bound > 0,
                     "--moe-path-table entry \"{}\": the bound must be a positive number of rows per expert", entry);
      MOESERVE_CHECK(table.empty() || *bound > table.back().max_rows_per_expert,
                     "--moe-path-table entry \"{}\": bounds must increase", entry);
      MOESERVE_CHECK(!last, "--moe-path-table \"{}\": the last entry takes the rest and has no bound", text);
      rule.max_rows_per_expert = *bound;
    }
    table.push_back(rule);
    start = comma + 1;
  }
  return table;
}

MoeMixedBounds parse_moe_mixed_bounds(std::string_view text) {
  const size_t colon = text.find(':');
  MoeMixedBounds b;
  bool ok = colon != std::string_view::npos;
  if (ok) {
    const std::optional<int64_t> n8 = parse_int(text.substr(0, colon)), n16 = parse_int(text.substr(colon + 1));
    ok = n8 && n16 && *n8 >= 1 && *n8 <= *n16 && *n16 <= 4096;
    if (ok) {
      b.n8_max = static_cast<int>(*n8);
      b.n16_max = static_cast<int>(*n16);
    }
  }
  MOESERVE_CHECK(ok, "mixed tile bounds \"{}\": want N8:N16 with 1 <= N8 <= N16 <= 4096 (rows of an expert up to "
                 "which 8- and then 16-row tiles serve it)", text);
  return b;
}

int moe_mixed_class_max_tiles(int64_t rows, int cls, const MoeMixedBounds& b, int num_experts) {
  MOESERVE_CHECK(cls >= 0 && cls <= 2 && b.n8_max >= 1 && b.n16_max >= b.n8_max, "mixed MoE tiles: class {} with "
                 "bounds {}:{}", cls, b.n8_max, b.n16_max);
  moe_max_tiles(rows, 8, num_experts);  // checks rows and experts
  // Experts of r rows take ceil(r / width) <= floor(r / width) + 1 tiles: at most rows / width + experts in all,
  // and for the bounded classes at most ceil(max_rows / width) each.
  const int width = moe_mixed_class_rows(cls);
  if (cls == 0) {
    const int64_t experts = std::min<int64_t>(num_experts, rows / (b.n16_max + 1));
    return static_cast<int>(experts == 0 ? 0 : rows / width + experts);
  }
  const int max_rows = cls == 1 ? b.n16_max : b.n8_max;
  const int64_t experts = std::min<int64_t>(num_experts, cls == 1 ? rows / (b.n8_max + 1) : rows);
  return static_cast<int>(std::min<int64_t>(rows / width + experts, experts * ((max_rows + width - 1) / width)));
}

int moe_split_class_max_tiles(int64_t rows, int cls, int split_max, int num_experts) {
  MOESERVE_CHECK((cls == 0 || cls == 1) && split_max >= 0 && split_max < kMoePrefillTileRows,
                 "split MoE tiles: class {} with bound {} (classes 0 and 1; 0 <= bound <= {})", cls, split_max,
                 kMoePrefillTileRows - 1);
  if (cls == 0) return moe_max_tiles(rows, kMoePrefillTileRows, num_experts);
  // Each expert's at most split_max rows in 32-row tiles: ceil(split_max / 32) a expert, and no more tiles than
  // rows / 32 + experts with rows.
  const int64_t experts = std::min<int64_t>(num_experts, rows);
  const int per_expert = (split_max + kMoeSplitSmallTileRows - 1) / kMoeSplitSmallTileRows;
  return static_cast<int>(std::min<int64_t>(moe_max_tiles(rows, kMoeSplitSmallTileRows, num_experts),
                                            experts * per_expert));
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

int64_t moe_hot_bytes(int slots, int64_t out_features, int64_t in_features, bool fp8) {
  MOESERVE_CHECK(slots >= 1 && slots <= kMoeHotMaxSlots, "prefill-wgmma-hot: {} hot expert slots (1 to {})", slots,
                 kMoeHotMaxSlots);
  MOESERVE_CHECK(out_features > 0 && out_features <= int64_t{1} << 24 && in_features > 0 &&
                     in_features <= int64_t{1} << 24,
                 "prefill-wgmma-hot: {} x {} weights", out_features, in_features);
  const int64_t tiles = (out_features + kMoePrefillWgmmaTileN - 1) / kMoePrefillWgmmaTileN;
  const int64_t k_step = fp8 ? 128 : 64;  // one 128-byte swizzle row of the element type
  return slots * tiles * ((in_features + k_step - 1) / k_step) * kMoePrefillWgmmaTileN * 128;
}

MoeGrid moe_prefill_wgmma_m256_grid(int64_t rows, int64_t out_features, int64_t in_features, int num_experts,
                                    int multiprocessors) {
  return persistent_grid("moe_prefill_wgmma_m256", rows, kMoePrefillM256TileRows, out_features, in_features,
                         kMoePrefillM256TileN, num_experts, multiprocessors);
}

MoeGrid moe_decode_wgmma_grid(int64_t rows, int tile_rows, int64_t out_features, int64_t in_features,
                              int num_experts, int multiprocessors) {
  return persistent_grid("moe_decode_wgmma", rows, tile_rows, out_features, in_features,
                         moe_decode_wgmma_weight_rows(tile_rows), num_experts, multiprocessors);
}

MoeGrid moe_decode_mma_grid(int64_t rows, int tile_rows, int64_t out_features, int64_t in_features, int num_experts) {
  MOESERVE_CHECK(out_features > 0 && out_features <= int64_t{1} << 24, "moe_decode_mma: out_features {}", out_features);
  // The tiled layout pads each row to whole 128-k chunks (moe_layout.h).
  MOESERVE_CHECK(in_features > 0 && out_features * ((in_features + 127) / 128 * 128) / 2 < int64_t{1} << 31,
                 "moe_decode_mma: {} x {} MXFP4 weights an expert (under 2^31 bytes)", out_features, in_features);
  MoeGrid grid;
  grid.weight_tiles = static_cast<int>((out_features + kMoeDecodeMmaWeightRows - 1) / kMoeDecodeMmaWeightRows);
  grid.blocks = moe_max_tiles(rows, tile_rows, num_experts);
  MOESERVE_CHECK(grid.blocks <= 65535, "moe_decode_mma: {} rows make up to {} tiles of {} (at most 65,535)", rows,
                 grid.blocks, tile_rows);
  return grid;
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
