// The MLA latent cache's addressing and the decode kernel's host-side plan (runner/cuda/mla_layout.h), on the CPU:
// the same functions the kernels call. Rows of every (block, layer, row) tile the pool without overlap, a position
// goes through its block table, and the plan's choices (keys per split, splits, partial size, shape checks; the
// absorbed or the expanded form per sequence) hold at DeepSeek-V3's and a small model's widths. The kernels are
// checked against the CPU on a GPU (tests/runner/cuda/mla_decode_test.cc, mla_absorb_test.cc, mla_prefill_test.cc).
#include <gtest/gtest.h>

#include <vector>

#include "runner/cuda/mla_layout.h"

namespace moeserve::cuda {
namespace {

constexpr MlaCacheShape kV3{512, 64, 16, 3};
constexpr MlaCacheShape kSmall{32, 16, 16, 2};

TEST(MlaLayout, RowsTileThePoolWithoutOverlap) {
  for (const MlaCacheShape& s : {kV3, kSmall}) {
    const int blocks = 3, width = mla_row_width(s);
    std::vector<int> hits(blocks * mla_block_elements(s), 0);
    for (int b = 0; b < blocks; ++b)
      for (int layer = 0; layer < s.layers; ++layer)
        for (int row = 0; row < s.block_size; ++row) {
          const int64_t at = mla_row_offset(s, b, layer, row);
          ASSERT_GE(at, 0);
          ASSERT_LE(at + width, static_cast<int64_t>(hits.size()));
          for (int e = 0; e < width; ++e) ++hits[at + e];
        }
    for (int h : hits) ASSERT_EQ(h, 1);
  }
  EXPECT_EQ(mla_row_width(kV3), 576);
  // A layer's 16 rows of a block are contiguous, the block's layers one after another.
  EXPECT_EQ(mla_row_offset(kV3, 0, 0, 1), 576);
  EXPECT_EQ(mla_row_offset(kV3, 0, 1, 0), 16 * 576);
  EXPECT_EQ(mla_row_offset(kV3, 2, 0, 0), 2 * 3 * 16 * 576);
}

TEST(MlaLayout, PositionsGoThroughTheBlockTable) {
  const std::vector<int32_t> table = {7, -1, 2};
  EXPECT_EQ(mla_position_offset(kV3, table.data(), 1, 5), mla_row_offset(kV3, 7, 1, 5));
  EXPECT_EQ(mla_position_offset(kV3, table.data(), 0, 16), -1);
  EXPECT_EQ(mla_position_offset(kV3, table.data(), 2, 47), mla_row_offset(kV3, 2, 2, 15));
}

TEST(MlaLayout, SplitsCoverEveryVisiblePosition) {
  for (int keys : {16, 32, 48, 64})
    for (int last = 0; last < 300; ++last) {
      const int splits = mla_decode_splits(last, keys);
      EXPECT_LE((splits - 1) * keys, last);  // the last split starts at or before the token's own position
      EXPECT_GT(splits * keys, last);        // and reaches it
    }
}

TEST(MlaLayout, SplitKeysFillTheGpu) {
  // Two waves on 132 multiprocessors are 264 blocks (query tokens x splits of the longest context).
  EXPECT_EQ(mla_decode_split_keys(1, 2048, 132), 16);   // 32 splits of 64, 64 of 32: too few; 128 of 16
  EXPECT_EQ(mla_decode_split_keys(4, 2048, 132), 16);   // 4 x 64 splits of 32 = 256 < 264
  EXPECT_EQ(mla_decode_split_keys(8, 2048, 132), 32);   // 8 x 32 = 256 < 264 at 64; 8 x 64 = 512 at 32
  EXPECT_EQ(mla_decode_split_keys(16, 2048, 132), 64);  // 16 x 32 = 512
  EXPECT_EQ(mla_decode_split_keys(1, 20000, 132), 64);  // a long context alone: 313 splits of 64
}

TEST(MlaLayout, PartialSizeAndSharedMemory) {
  EXPECT_EQ(mla_decode_partial_floats(2, 128, 512, 3), size_t{2} * 128 * 3 * 514);
  // V3 at 64 keys per split: 64 rows of 578 bf16, 8 query rows of 580 floats, 8 x 64 scores.
  EXPECT_EQ(mla_decode_shared_bytes(576, 64), 64 * 578 * 2 + 8 * 580 * 4 + 8 * 64 * 4);
  EXPECT_LE(2 * mla_decode_shared_bytes(576, 64), 228 * 1024);  // two blocks per H200 multiprocessor
  // Version 2: 64 rows of 1,168 bytes (bf16 with 16 bytes of pad), and for fp8 the 576 stored bytes of each; with
  // its 512 static bytes and the 1 KB the hardware keeps per block, still two blocks per multiprocessor.
  EXPECT_EQ(mla_decode_mma_shared_bytes(576, 64, 2), 64 * 1168);
  EXPECT_EQ(mla_decode_mma_shared_bytes(576, 64, 1), 64 * 1168 + 64 * 576);
  EXPECT_LE(2 * (mla_decode_mma_shared_bytes(576, 64, 1) + 512 + 1024), 228 * 1024);
  EXPECT_EQ((2 * 576 + 16) / 16 % 2, 1);  // an odd number of 16-byte units a row: conflict-free ldmatrix
}

// The merge kernel reads weight[] in 16-byte-aligned groups of four, the last one possibly as a whole: for every
// token's split count up to the scratch's max_splits, the group holding its last weight ends inside the shared
// array the launch allocates. The first GPU run's case: 157 splits (2,500 positions at 16 keys) in 157 floats, a
// 12-byte read at weight[156] running two floats past the end.
TEST(MlaLayout, MergeWeightsCoverWholeGroups) {
  EXPECT_EQ(mla_merge_weight_floats(157), 160);
  EXPECT_EQ(mla_merge_shared_bytes(mla_decode_splits(2499, 16)), 160 * 4);
  for (int max_splits = 1; max_splits <= 300; ++max_splits) {
    const int floats = mla_merge_shared_bytes(max_splits) / 4;
    ASSERT_EQ(floats % 4, 0) << max_splits;
    for (int splits = 1; splits <= max_splits; ++splits) {
      ASSERT_LE((splits - 1) / 4 * 4 + 4, floats) << splits << " of " << max_splits;
      ASSERT_LE(mla_merge_weight_floats(splits), floats) << splits << " of " << max_splits;  // the zeroed pad
    }
  }
  EXPECT_EQ(mla_merge_error(1), "");
  EXPECT_EQ(mla_merge_error(12032), "");
  EXPECT_LE(mla_merge_shared_bytes(12032), kMlaMaxMergeSharedBytes);
  EXPECT_NE(mla_merge_error(12033), "");
  EXPECT_NE(mla_merge_error(0), "");
}

TEST(MlaLayout, ShapeChecks) {
  for (const MlaDecodeVersion v : {MlaDecodeVersion::v1, MlaDecodeVersion::v2}) {
    EXPECT_EQ(mla_shape_error(kV3, 2, 128, 64, v), "");
    EXPECT_EQ(mla_shape_error(kV3, 1, 128, 16, v), "");
    EXPECT_EQ(mla_shape_error(kSmall, 1, 4, 32, v), "");
    EXPECT_EQ(mla_shape_error(kSmall, 2, 132, 48, v), "");
    EXPECT_NE(mla_shape_error(MlaCacheShape{24, 16, 16, 1}, 1, 4, 64, v), "");  // 40 fp8 bytes a row
    EXPECT_NE(mla_shape_error(MlaCacheShape{32, 15, 16, 1}, 2, 4, 64, v), "");  // odd rope_dim
    EXPECT_NE(mla_shape_error(kV3, 2, 128, 24, v), "");
    EXPECT_NE(mla_shape_error(kV3, 2, 0, 64, v), "");
    EXPECT_NE(mla_shape_error(MlaCacheShape{4096, 64, 16, 1}, 2, 128, 64, v), "");  // rows past shared memory
  }
  // Version 2's k steps of 16 stay inside q~ or q_pe, and its output tiles are 16 columns wide.
  EXPECT_EQ(mla_shape_error(MlaCacheShape{40, 24, 16, 1}, 2, 4, 64, MlaDecodeVersion::v1), "");
  EXPECT_NE(mla_shape_error(MlaCacheShape{40, 24, 16, 1}, 2, 4, 64, MlaDecodeVersion::v2), "");
  EXPECT_NE(mla_shape_error(MlaCacheShape{48, 8, 16, 1}, 2, 4, 64, MlaDecodeVersion::v2), "");
}

// The choice of form per sequence (mla_prefill_pays), at DeepSeek-V3's widths (latent 512, nope 128, v 128: the
// rule (context - q_len) x 170.7 < q_len (context - (q_len - 1) / 2), the pairs) and the tiny test model's (144, 32,
// 40: 48).
TEST(MlaLayout, ExpandedPrefillPaysForManyQueriesOverLittleCachedContext) {
  auto v3 = [](int context, int q_len) { return mla_prefill_pays(context, q_len, 512, 128, 128); };
  auto tiny = [](int context, int q_len) { return mla_prefill_pays(context, q_len, 144, 32, 40); };
  for (int q_len : {1, 2, 63, 64, 65, 8192, 163840}) {  // a whole prompt: no cached row to expand
    EXPECT_TRUE(v3(q_len, q_len)) << q_len;
    EXPECT_TRUE(tiny(q_len, q_len)) << q_len;
  }
  for (int context : {2, 3, 100, 4096, 163840}) {  // a decode token
    EXPECT_FALSE(v3(context, 1)) << context;
    EXPECT_FALSE(tiny(context, 1)) << context;
  }
  // A chunk of 64 after 19 cached: 3,243 < 3,296 pairs; after 20: 3,413 > 3,360 (the author's 171 splits them
  // alike: 3,249 and 3,420). After 4,032: 688,128 > 260,128.
  EXPECT_TRUE(v3(64 + 19, 64));
  EXPECT_FALSE(v3(64 + 20, 64));
  EXPECT_FALSE(v3(4096, 64));
  // A chunk of 512 after 3,584 cached: 611,669 < 1,966,336. Over a long cached context the chunk must pass ~171
  // tokens: at 100,000 in all, 170 tokens give 17,037,653 > 16,985,635 pairs, 171 give 17,037,483 < 17,085,465.
  EXPECT_TRUE(v3(4096, 512));
  EXPECT_FALSE(v3(100000, 170));
  EXPECT_TRUE(v3(100000, 171));
  EXPECT_TRUE(v3(100000, 8192));
  // The tiny model: a chunk of 5 only as a whole prompt (48 > 20 pairs after one cached token); 64 after 16 cached
  // (768 < 3,104); 23 after 17 not (816 > 667), as DeepseekCudaRunnerTest's schedules take them.
  EXPECT_TRUE(tiny(5, 5));
  EXPECT_FALSE(tiny(6, 5));
  EXPECT_TRUE(tiny(80, 64));
  EXPECT_FALSE(tiny(40, 23));
  // Widths whose absorbed pair costs no more than the expanded one (2 latent <= nope + v) never pay, not even for
  // a whole prompt, where both forms cost the same a row.
  EXPECT_FALSE(mla_prefill_pays(100, 100, 64, 64, 64));
  EXPECT_FALSE(mla_prefill_pays(1, 1, 32, 48, 48));
}

TEST(MlaLayout, VersionNames) {
  MlaDecodeVersion v = MlaDecodeVersion::v2;
  EXPECT_TRUE(mla_decode_version_named("v1", v));
  EXPECT_EQ(v, MlaDecodeVersion::v1);
  EXPECT_TRUE(mla_decode_version_named("v2", v));
  EXPECT_EQ(v, MlaDecodeVersion::v2);
  for (const char* bad : {"", "V2", "2", "v3", "v2 "}) {
    EXPECT_FALSE(mla_decode_version_named(bad, v)) << bad;
    EXPECT_EQ(v, MlaDecodeVersion::v2) << bad;  // left as it was
  }
  EXPECT_STREQ(mla_decode_version_name(MlaDecodeVersion::v1), "v1");
  EXPECT_STREQ(mla_decode_version_name(MlaDecodeVersion::v2), "v2");
}

}  // namespace
}  // namespace moeserve::cuda
