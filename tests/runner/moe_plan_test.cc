// The MoE expert GEMMs' host-side plan (runner/cuda/moe_plan.h) on the CPU: path choice by rows per expert, the
// grouping's tile bound against every way of spreading rows over experts, the persistent grids, and clear errors
// for shapes the kernels cannot take.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "runner/cuda/moe_plan.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

void expect_error(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(MoePlan, PathFollowsRowsPerExpert) {
  // gpt-oss-120b: top-4 of 128, so rows per expert = tokens / 32.
  EXPECT_EQ(choose_moe_path(false, 8192, 4, 128), MoePath::reference);
  EXPECT_EQ(choose_moe_path(true, 1, 4, 128), MoePath::decode_x1);      // 4 grouped rows
  EXPECT_EQ(choose_moe_path(true, 2, 4, 128), MoePath::decode_mma_n8);  // 8
  EXPECT_EQ(choose_moe_path(true, 7, 4, 128), MoePath::decode_mma_n8);  // 0.219
  EXPECT_EQ(choose_moe_path(true, 32, 4, 128), MoePath::decode_mma_n8);
  EXPECT_EQ(choose_moe_path(true, 144, 4, 128), MoePath::decode_mma_n8);   // 4.5
  EXPECT_EQ(choose_moe_path(true, 145, 4, 128), MoePath::decode_mma_n16);
  EXPECT_EQ(choose_moe_path(true, 256, 4, 128), MoePath::decode_mma_n16);  // 8
  EXPECT_EQ(choose_moe_path(true, 257, 4, 128), MoePath::decode_mma_mixed);
  EXPECT_EQ(choose_moe_path(true, 1024, 4, 128), MoePath::decode_mma_mixed);
  EXPECT_EQ(choose_moe_path(true, 1254, 4, 128), MoePath::decode_mma_mixed);  // 39.19
  EXPECT_EQ(choose_moe_path(true, 1255, 4, 128), MoePath::decode_mma_n64);  // 39.22
  EXPECT_EQ(choose_moe_path(true, 2896, 4, 128), MoePath::decode_mma_n64);  // 90.5
  EXPECT_EQ(choose_moe_path(true, 2897, 4, 128), MoePath::prefill_wgmma_split);
  EXPECT_EQ(choose_moe_path(true, 8192, 4, 128), MoePath::prefill_wgmma_split);
  // gpt-oss-20b: top-4 of 32.
  EXPECT_EQ(choose_moe_path(true, 1, 4, 32), MoePath::decode_x1);      // 4 grouped rows
  EXPECT_EQ(choose_moe_path(true, 2, 4, 32), MoePath::decode_mma_n8);  // 8
  EXPECT_EQ(choose_moe_path(true, 1024, 4, 32), MoePath::prefill_wgmma_split);
  expect_error([] { choose_moe_path(true, -1, 4, 128); }, "-1 tokens");
}

TEST(MoePlan, EveryChosenPathHasATileItsKernelReads) {
  for (int64_t tokens = 0; tokens <= 20000; tokens += 7) {
    const MoePath path = choose_moe_path(true, tokens, 4, 128);
    const double per_expert = tokens * 4.0 / 128;
    // A decode_mma tile holds at least two fifths of the mean rows per expert (most experts take one or two tiles,
    // each re-reading the expert's weights).
    if (path == MoePath::decode_mma_n8 || path == MoePath::decode_mma_n16 || path == MoePath::decode_mma_n32 ||
        path == MoePath::decode_mma_n64) {
      EXPECT_GE(moe_rows_per_tile(path), per_expert / 2.5) << tokens;
    }
    if (path == MoePath::decode_mma_mixed) {
      EXPECT_GE(32, per_expert / 2.5) << tokens;  // its widest tiles
    }
  }
  EXPECT_EQ(moe_rows_per_tile(MoePath::prefill_wgmma), kMoePrefillTileRows);
  EXPECT_EQ(moe_rows_per_tile(MoePath::decode_x2), 16);
  EXPECT_EQ(moe_rows_per_tile(MoePath::decode_mma_n16), 16);
}

TEST(MoePlan, DecodeMmaGridCoversEveryWeightRowAndTile) {
  // gpt-oss-120b's first projection (5,760 rows: 22.5 slices of 256) and second (2,880: 11.25), 32-row tiles.
  MoeGrid g = moe_decode_mma_grid(1024 * 4, 32, 5760, 2880, 128);
  EXPECT_EQ(g.weight_tiles, 23);
  EXPECT_EQ(g.blocks, moe_max_tiles(1024 * 4, 32, 128));
  EXPECT_EQ(moe_decode_mma_grid(4, 8, 2880, 2880, 128).weight_tiles, 12);
  EXPECT_EQ(moe_decode_mma_grid(4, 8, 256, 64, 4).weight_tiles, 1);
  // The grid's y dimension holds 65,535 tiles.
  expect_error([] { moe_decode_mma_grid(int64_t{8} << 20, 8, 2880, 2880, 128); }, "at most 65,535");
  expect_error([] { moe_decode_mma_grid(8, 8, int64_t{1} << 24, int64_t{1} << 24, 4); }, "under 2^31 bytes");
  expect_error([] { moe_decode_mma_grid(8, 8, 0, 64, 4); }, "out_features 0");
}

TEST(MoePlan, MixedTilesTakeTheWidthOfEachExpertsOwnCount) {
  const MoeMixedBounds defaults;
  EXPECT_EQ(moe_rows_per_tile(MoePath::decode_mma_mixed), kMoeMixedTileRows);
  EXPECT_EQ(moe_mixed_tile_rows(1, defaults), 8);
  EXPECT_EQ(moe_mixed_tile_rows(defaults.n8_max, defaults), 8);
  EXPECT_EQ(moe_mixed_tile_rows(defaults.n8_max + 1, defaults), 16);
  EXPECT_EQ(moe_mixed_tile_rows(defaults.n16_max, defaults), 16);
  EXPECT_EQ(moe_mixed_tile_rows(defaults.n16_max + 1, defaults), 32);
  EXPECT_EQ(moe_mixed_tile_rows(5000, defaults), 32);
  const MoeMixedBounds b = parse_moe_mixed_bounds("12:40");
  EXPECT_EQ(b.n8_max, 12);
  EXPECT_EQ(b.n16_max, 40);
  EXPECT_EQ(moe_mixed_tile_rows(12, b), 8);
  EXPECT_EQ(moe_mixed_tile_rows(13, b), 16);
  EXPECT_EQ(moe_mixed_tile_rows(41, b), 32);
  EXPECT_EQ(parse_moe_mixed_bounds("1:1").n16_max, 1);
  for (const char* bad : {"", "12", "12:", ":40", "0:4", "8:4", "8:5000", "a:b", "8:16:32", "-1:4"})
    expect_error([bad] { parse_moe_mixed_bounds(bad); }, "mixed tile bounds");
  expect_error([] { parse_moe_mixed_bounds("8:4"); }, "\"8:4\"");
  // Each class's launch is sized by the most tiles its experts can make. Batch 256 of gpt-oss-120b (1,024 rows over
  // 128 experts) with bounds 8:16: at most 128 experts of <= 8 rows, 113 of 9-16 rows (one tile each), and 1,024 /
  // 32 tiles plus one partial for each of at most 60 experts of > 16 rows.
  const MoeMixedBounds b816{8, 16};
  EXPECT_EQ(moe_mixed_class_max_tiles(1024, 2, b816, 128), 128);
  EXPECT_EQ(moe_mixed_class_max_tiles(1024, 1, b816, 128), 113);
  EXPECT_EQ(moe_mixed_class_max_tiles(1024, 0, b816, 128), 32 + 60);
  // Few rows: no expert can reach the wide classes.
  EXPECT_EQ(moe_mixed_class_max_tiles(8, 1, b816, 128), 0);
  EXPECT_EQ(moe_mixed_class_max_tiles(16, 0, b816, 128), 0);
  EXPECT_EQ(moe_mixed_class_max_tiles(17, 0, b816, 128), 1);
  // Bounds of several tiles an expert: 4 experts of up to 40 rows could take 5 tiles each, but 40 rows make at most
  // 40 / 8 + 4 (a partial tile each).
  EXPECT_EQ(moe_mixed_class_max_tiles(40, 2, MoeMixedBounds{40, 40}, 4), 9);
  EXPECT_EQ(moe_mixed_class_max_tiles(40, 2, MoeMixedBounds{40, 40}, 4), moe_max_tiles(40, 8, 4));
  // The bound holds for every split of the rows (brute force over small cases).
  for (const MoeMixedBounds b : {MoeMixedBounds{8, 16}, MoeMixedBounds{1, 1}, MoeMixedBounds{12, 40}})
    for (int rows = 0; rows <= 90; ++rows)
      for (int experts = 1; experts <= 4; ++experts) {
        // The most tiles of each class over every way `rows` can split among `experts` (counts in non-increasing
        // order suffice: tiles do not depend on which expert holds a count).
        int most[3] = {0, 0, 0};
        std::vector<int> split(experts, 0);
        std::function<void(int, int, int)> walk = [&](int i, int left, int cap) {
          if (i == experts - 1) {
            if (left > cap) return;
            split[i] = left;
            int tiles[3] = {0, 0, 0};
            for (int r : split) {
              const int cls = moe_mixed_tile_class(r, b), w = moe_mixed_class_rows(cls);
              tiles[cls] += (r + w - 1) / w;
            }
            for (int c = 0; c < 3; ++c) most[c] = std::max(most[c], tiles[c]);
            return;
          }
          for (int r = std::min(left, cap); r >= 0; --r) {
            split[i] = r;
            walk(i + 1, left - r, r);
          }
        };
        walk(0, rows, rows);
        for (int c = 0; c < 3; ++c)
          ASSERT_GE(moe_mixed_class_max_tiles(rows, c, b, experts), most[c])
              << b.n8_max << ":" << b.n16_max << " rows " << rows << " experts " << experts << " class " << c;
      }
  expect_error([] { moe_mixed_class_max_tiles(8, 3, MoeMixedBounds{}, 4); }, "class 3");
}

// The split grouping (prefill_wgmma_split): an expert's whole 128-row tiles stay on the grouped GEMM, and its last
// rows go to 32-row tiles when there are at most split_max of them; each class's launch bound holds for every way
// the rows can fall among the experts (brute force over small cases at tile sizes scaled down by the same rule).
TEST(MoePlan, SplitTilesSendFewLastRowsToNarrowTiles) {
  EXPECT_EQ(moe_rows_per_tile(MoePath::prefill_wgmma_split), kMoeSplitTileRows);
  EXPECT_TRUE(moe_path_takes_fp8(MoePath::prefill_wgmma_split));
  EXPECT_EQ(MoeMixedBounds{}.split_max, kMoeSplitMaxDefault);
  struct Case {
    int rows, split_max, small, wide, narrow;
  };
  for (const Case& c : {Case{0, 64, 0, 0, 0}, Case{1, 64, 1, 0, 1}, Case{64, 64, 64, 0, 2}, Case{65, 64, 0, 1, 0},
                        Case{128, 64, 0, 1, 0}, Case{129, 64, 1, 1, 1}, Case{192, 64, 64, 1, 2},
                        Case{193, 64, 0, 2, 0}, Case{300, 64, 44, 2, 2}, Case{300, 0, 0, 3, 0},
                        Case{127, 127, 127, 0, 4}, Case{255, 127, 127, 1, 4}, Case{33, 32, 0, 1, 0}}) {
    EXPECT_EQ(moe_split_small_rows(c.rows, c.split_max), c.small) << c.rows << " rows, bound " << c.split_max;
    EXPECT_EQ(moe_split_tiles(c.rows, c.split_max, 0), c.wide) << c.rows << " rows, bound " << c.split_max;
    EXPECT_EQ(moe_split_tiles(c.rows, c.split_max, 1), c.narrow) << c.rows << " rows, bound " << c.split_max;
  }
  // Every split of `rows` rows over `experts` experts stays within each class's bound.
  for (int split_max : {0, 1, 32, 64, 127})
    for (int rows : {0, 1, 5, 64, 65, 130, 200, 257, 400})
      for (int experts = 1; experts <= 3; ++experts) {
        int most[2] = {0, 0}, most_total = 0;
        std::function<void(int, int, int, int)> walk = [&](int i, int left, int wide, int narrow) {
          if (i == experts - 1) {
            wide += moe_split_tiles(left, split_max, 0);
            narrow += moe_split_tiles(left, split_max, 1);
            most[0] = std::max(most[0], wide);
            most[1] = std::max(most[1], narrow);
            most_total = std::max(most_total, wide + narrow);
            return;
          }
          for (int r = 0; r <= left; ++r)
            walk(i + 1, left - r, wide + moe_split_tiles(r, split_max, 0), narrow + moe_split_tiles(r, split_max, 1));
        };
        walk(0, rows, 0, 0);
        for (int cls = 0; cls < 2; ++cls)
          ASSERT_GE(moe_split_class_max_tiles(rows, cls, split_max, experts), most[cls])
              << "bound " << split_max << " rows " << rows << " experts " << experts << " class " << cls;
        // Never more than the 8-row tiling's bound, which sizes the grouping's tile list (moe_buffers.h).
        EXPECT_LE(most_total, moe_max_tiles(rows, 8, experts));
      }
  // gpt-oss-120b prefill of 8k tokens (32,768 rows over 128 experts), bound 64: two 32-row tiles an expert at most.
  EXPECT_EQ(moe_split_class_max_tiles(32768, 1, 64, 128), 256);
  EXPECT_EQ(moe_split_class_max_tiles(32768, 0, 64, 128), moe_max_tiles(32768, 128, 128));
  expect_error([] { moe_split_class_max_tiles(100, 2, 64, 8); }, "class 2");
  expect_error([] { moe_split_class_max_tiles(100, 0, 128, 8); }, "bound 128");
}

TEST(MoePlan, AGivenTableReplacesTheBuiltInChoice) {
  const MoePathTable table = parse_moe_path_table("decode-x1:3.5,decode-mma-n16:12,decode-mma-n64:48,prefill-wgmma");
  ASSERT_EQ(table.size(), 4u);
  EXPECT_EQ(table[1].path, MoePath::decode_mma_n16);
  EXPECT_EQ(table[1].max_rows_per_expert, 12);
  // gpt-oss-120b: rows per expert = tokens / 32.
  EXPECT_EQ(choose_moe_path(true, 112, 4, 128, table), MoePath::decode_x1);      // 3.5
  EXPECT_EQ(choose_moe_path(true, 113, 4, 128, table), MoePath::decode_mma_n16);  // 3.53
  EXPECT_EQ(choose_moe_path(true, 384, 4, 128, table), MoePath::decode_mma_n16);  // 12
  EXPECT_EQ(choose_moe_path(true, 385, 4, 128, table), MoePath::decode_mma_n64);
  EXPECT_EQ(choose_moe_path(true, 1 << 20, 4, 128, table), MoePath::prefill_wgmma);
  EXPECT_EQ(choose_moe_path(false, 8, 4, 128, table), MoePath::reference);  // fp32 steps keep the reference
  EXPECT_EQ(parse_moe_path_table("decode-mma-n32").size(), 1u);
  expect_error([] { parse_moe_path_table("decode-x1:4,decode-x2:2,prefill-wgmma"); }, "bounds must increase");
  expect_error([] { parse_moe_path_table("decode-x1,prefill-wgmma"); }, "\"decode-x1\" has no bound");
  expect_error([] { parse_moe_path_table("decode-x1:4,prefill-wgmma:9"); }, "the last entry takes the rest");
  expect_error([] { parse_moe_path_table("decode-x1:-1,prefill-wgmma"); }, "positive number");
  expect_error([] { parse_moe_path_table("decode-x1:4x,prefill-wgmma"); }, "positive number");
  expect_error([] { parse_moe_path_table("decode-x9:4,prefill-wgmma"); }, "unknown MoE path \"decode-x9\"");
  expect_error([] { parse_moe_path_table("reference"); }, "the reference path");
  expect_error([] { parse_moe_path_table(""); }, "unknown MoE path \"\"");
  expect_error([] { parse_moe_path_table("decode-x1:4,"); }, "unknown MoE path \"\"");
}

TEST(MoePlan, PathNamesRoundTrip) {
  for (MoePath path : kMoePaths) EXPECT_EQ(parse_moe_path(moe_path_name(path)), path);
  expect_error([] { parse_moe_path("decode-wgmma"); }, "known: reference, decode-x1");
}

// The tile list's capacity bound holds for every split of `rows` rows over `experts` experts (small cases,
// exhaustively), and is reached by some split.
TEST(MoePlan, MaxTilesBoundsEverySplit) {
  for (int experts = 1; experts <= 4; ++experts)
    for (int rows = 0; rows <= 12; ++rows)
      for (int per_tile : {1, 2, 3, 8}) {
        int worst = 0;
        std::function<void(int, int, int)> split = [&](int expert, int left, int tiles) {
          if (expert == experts - 1) {
            worst = std::max(worst, tiles + (left + per_tile - 1) / per_tile);
            return;
          }
          for (int c = 0; c <= left; ++c) split(expert + 1, left - c, tiles + (c + per_tile - 1) / per_tile);
        };
        split(0, rows, 0);
        const int bound = moe_max_tiles(rows, per_tile, experts);
        EXPECT_GE(bound, worst) << rows << " rows, " << experts << " experts, tiles of " << per_tile;
        EXPECT_LE(bound, worst + experts) << rows << " rows, " << experts << " experts, tiles of " << per_tile;
      }
  expect_error([] { moe_max_tiles(int64_t{1} << 40, 1, 256); }, "rows make up to");
  expect_error([] { moe_max_tiles(-1, 8, 4); }, "for -1 rows");
}

TEST(MoePlan, PersistentGridsFillTheMachineAtMost) {
  // gpt-oss-120b prefill of 8,192 tokens: 32,768 rows, first projection 5,760 wide: 30 weight tiles of 192.
  const MoeGrid prefill = moe_prefill_wgmma_grid(32768, 5760, 2880, 128, 132);
  EXPECT_EQ(prefill.weight_tiles, 30);
  EXPECT_EQ(prefill.blocks, 132);
  // Decode at batch 1,024: 4,096 rows; second projection 2,880 wide: 6 slices of 512.
  const MoeGrid decode = moe_decode_wgmma_grid(4096, 32, 2880, 2880, 128, 132);
  EXPECT_EQ(decode.weight_tiles, 6);
  EXPECT_EQ(decode.blocks, 132);
  // The same kernel with 128-row tiles (wgmma_rs_n128) takes 256-row slices: 5,760 = 22.5 of them.
  EXPECT_EQ(moe_rows_per_tile(MoePath::wgmma_rs_n128), 128);
  EXPECT_EQ(moe_decode_wgmma_grid(32768, 128, 5760, 2880, 128, 132).weight_tiles, 23);
  EXPECT_EQ(moe_decode_wgmma_grid(32768, 128, 2880, 2880, 128, 132).weight_tiles, 12);
  EXPECT_EQ(moe_decode_wgmma_grid(4096, 64, 2880, 2880, 128, 132).weight_tiles, 6);
  // A handful of rows: fewer items than SMs.
  const MoeGrid small = moe_decode_wgmma_grid(3, 16, 96, 160, 4, 132);
  EXPECT_EQ(small.weight_tiles, 1);
  EXPECT_EQ(small.blocks, moe_max_tiles(3, 16, 4));
  EXPECT_EQ(moe_prefill_wgmma_grid(0, 5760, 2880, 128, 132).blocks, 0);
  EXPECT_EQ(moe_rows_per_tile(MoePath::prefill_wgmma_deep), 128);  // prefill_wgmma with four raw stages
  // The 256-row variant: 128 weight rows an item, 5,760 = 45 of them, 2,880 = 22.5 (23 items, the last half used).
  EXPECT_EQ(moe_rows_per_tile(MoePath::prefill_wgmma_m256), 256);
  EXPECT_EQ(moe_prefill_wgmma_m256_grid(32768, 5760, 2880, 128, 132).weight_tiles, 45);
  EXPECT_EQ(moe_prefill_wgmma_m256_grid(32768, 2880, 2880, 128, 132).weight_tiles, 23);
  EXPECT_EQ(moe_prefill_wgmma_m256_grid(32768, 5760, 2880, 128, 132).blocks, 132);
  // 300 rows over 4 experts: at most 300 / 256 + 4 = 5 tiles, x 1 weight tile.
  EXPECT_EQ(moe_prefill_wgmma_m256_grid(300, 96, 160, 4, 132).blocks, moe_max_tiles(300, 256, 4));
  expect_error([] { moe_prefill_wgmma_m256_grid(64, 0, 2880, 128, 132); }, "moe_prefill_wgmma_m256: out_features 0");
  expect_error([] { moe_decode_wgmma_grid(64, 16, 2880, 2880, 128, 0); }, "0 multiprocessors");
  expect_error([] { moe_prefill_wgmma_grid(64, 0, 2880, 128, 132); }, "out_features 0");
  // 2^30 rows of a 2^24-wide input on one SM: more 64-k steps than an int counts.
  expect_error([] { moe_prefill_wgmma_grid(int64_t{1} << 30, 192, int64_t{1} << 24, 1, 1); }, "pipeline steps");
}

// prefill_wgmma_hot: the split grouping's tiles, FP8 activations taken, and a scratch of one B image (192 weight rows
// x 128 bytes) per (slot, weight tile, k step): gpt-oss-120b's first projection is 30 tiles x 45 steps of 64 k (bf16)
// or 23 steps of 128 k (e4m3), 33,177,600 bytes a slot in bf16 (its 5,760 x 2,880 values x 2 bytes exactly).
TEST(MoePlan, HotScratchHoldsEveryTileOfEachSlot) {
  EXPECT_EQ(moe_rows_per_tile(MoePath::prefill_wgmma_hot), kMoeSplitTileRows);
  EXPECT_TRUE(moe_path_takes_fp8(MoePath::prefill_wgmma_hot));
  EXPECT_EQ(parse_moe_path("prefill-wgmma-hot"), MoePath::prefill_wgmma_hot);
  EXPECT_EQ(moe_hot_bytes(1, 5760, 2880, false), int64_t{5760} * 2880 * 2);
  EXPECT_EQ(moe_hot_bytes(8, 5760, 2880, false), int64_t{8} * 30 * 45 * 192 * 128);
  EXPECT_EQ(moe_hot_bytes(8, 5760, 2880, true), int64_t{8} * 30 * 23 * 192 * 128);
  EXPECT_EQ(moe_hot_bytes(2, 2880, 2880, false), int64_t{2} * 15 * 45 * 192 * 128);
  // Partial tiles and steps round up: 100 x 96 is one tile of 192 rows x 2 steps of 64 (1 of 128).
  EXPECT_EQ(moe_hot_bytes(3, 100, 96, false), int64_t{3} * 2 * 192 * 128);
  EXPECT_EQ(moe_hot_bytes(3, 100, 96, true), int64_t{3} * 192 * 128);
  expect_error([] { moe_hot_bytes(0, 5760, 2880, false); }, "0 hot expert slots (1 to 127)");
  expect_error([] { moe_hot_bytes(128, 5760, 2880, false); }, "128 hot expert slots");
  expect_error([] { moe_hot_bytes(8, 0, 2880, false); }, "0 x 2880 weights");
  // The built-in choice takes it for prefill-sized steps with FP8 activations only; a given table as it is.
  EXPECT_EQ(choose_moe_path(true, 8192, 4, 128), MoePath::prefill_wgmma_split);
  EXPECT_EQ(choose_moe_path(true, 8192, 4, 128, {}, /*fp8_activations=*/true), MoePath::prefill_wgmma_hot);
  EXPECT_EQ(choose_moe_path(true, 2897, 4, 128, {}, true), MoePath::prefill_wgmma_hot);   // just past 90.5 rows
  EXPECT_EQ(choose_moe_path(true, 2896, 4, 128, {}, true), MoePath::decode_mma_n64);      // decode sizes unchanged
  EXPECT_EQ(choose_moe_path(true, 1, 4, 128, {}, true), MoePath::decode_x1);
  EXPECT_EQ(choose_moe_path(false, 8192, 4, 128, {}, true), MoePath::reference);
  EXPECT_EQ(choose_moe_path(true, 8192, 4, 128, parse_moe_path_table("decode-x1:0.99,prefill-wgmma-hot")),
            MoePath::prefill_wgmma_hot);
  EXPECT_EQ(choose_moe_path(true, 8192, 4, 128, parse_moe_path_table("decode-x1:0.99,prefill-wgmma-split"), true),
            MoePath::prefill_wgmma_split);
}

TEST(MoePlan, ShapeChecksNameTheKernelAndTheValue) {
  check_moe_gemm_shape("k", 0, 5760, 2880, 128);
  check_moe_gemm_shape("k", 1 << 20, 2, 32, 1);
  expect_error([] { check_moe_gemm_shape("moe_x", -1, 64, 64, 4); }, "moe_x: -1 grouped rows");
  expect_error([] { check_moe_gemm_shape("moe_x", 8, 63, 64, 4); }, "moe_x: out_features 63");
  expect_error([] { check_moe_gemm_shape("moe_x", 8, 0, 64, 4); }, "out_features 0");
  expect_error([] { check_moe_gemm_shape("moe_x", 8, 64, 48, 4); }, "in_features 48");
  expect_error([] { check_moe_gemm_shape("moe_x", 8, 64, int64_t{1} << 25, 4); }, "in_features 33554432");
  expect_error([] { check_moe_gemm_shape("moe_x", 8, 64, 64, 0); }, "0 experts");
  expect_error([] { check_moe_gemm_shape("moe_x", 8, 64, 64, 257); }, "257 experts");
}

}  // namespace
}  // namespace moeserve::cuda
