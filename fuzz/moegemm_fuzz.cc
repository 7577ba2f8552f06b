// libFuzzer target for the MoE expert GEMMs' host side and their shared MXFP4 conversion: arbitrary bytes become
//   - words and scale bytes for mxfp4_word_to_bf16 (runner/cuda/moe_layout.h, the code the wgmma kernels run,
//     with prmt and the bf16 multiply emulated): every value must equal the e2m1 value times 2^(scale - 127);
//   - shapes, token counts, tile sizes and SM counts for the plan (runner/cuda/moe_plan.h): each call either
//     throws moeserve::Error or returns a plan that holds (grids within the SMs and covering every weight row,
//     a path whose tile its kernel takes), never overflowing (UBSan) or crashing;
//   - decode_mma_mixed's bounds and per-class grids (moe_mixed_class_max_tiles);
//   - shapes and (row, block) places for the tiled weight layout (mxfp4_tiled_index): each lands inside the expert's
//     padded elements and decodes back to itself, its chunk's scale word aligned;
//   - a path name for parse_moe_path, a table for parse_moe_path_table, bounds for parse_moe_mixed_bounds.
// Seeds: tests/fixtures/moegemm.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "model/mxfp4.h"
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "util/bfloat16.h"
#include "util/error.h"

namespace {

using namespace moeserve;
using namespace moeserve::cuda;

struct Reader {
  const uint8_t* data;
  size_t size;
  template <typename T>
  T take() {
    T value{};
    const size_t n = size < sizeof(T) ? size : sizeof(T);
    std::memcpy(&value, data, n);
    data += n;
    size -= n;
    return value;
  }
};

void check(bool condition) {
  if (!condition) __builtin_trap();
}

void dequantise(uint32_t word, uint8_t scale_byte) {
  const uint32_t scale = scale_byte % 129;  // the upload's range (device_weights.cc)
  uint32_t out[4];
  mxfp4_word_to_bf16(mxfp4_pack_word(word), mxfp4_scale_bf16x2(scale), out);
  check(mxfp4_unpack_word(mxfp4_pack_word(word)) == word);
  const float factor = e8m0_to_float(static_cast<uint8_t>(scale));
  for (int value = 0; value < 8; ++value) {
    const uint16_t expected = float_to_bf16(kFp4Values[(word >> (4 * value)) & 0xfu] * factor);
    check(static_cast<uint16_t>(out[value / 2] >> (16 * (value % 2))) == expected);
  }
}

// The tiled layout's index (moe_layout.h) decoded back: slices before the row's are full, then chunk, row, block.
void tiled(Reader& in) {
  const int64_t rows = 1 + in.take<uint16_t>() % 20000;
  const int blocks_per_row = 1 + in.take<uint8_t>();
  const int64_t row = in.take<uint16_t>() % rows;
  const int block = in.take<uint8_t>() % blocks_per_row;
  const int padded = mxfp4_padded_blocks(blocks_per_row);
  const int64_t index = mxfp4_tiled_index(row, block, rows, blocks_per_row);
  check(index >= 0 && index < rows * padded && (index - block % kMxfp4ChunkBlocks) % 4 == 0);
  const int64_t first = index / (int64_t{kMxfp4SliceRows} * padded) * kMxfp4SliceRows;
  const int64_t slice_rows = std::min<int64_t>(kMxfp4SliceRows, rows - first);
  const int64_t inside = index - first * padded, chunk_elements = slice_rows * kMxfp4ChunkBlocks;
  check(first + (inside % chunk_elements) / kMxfp4ChunkBlocks == row);
  check((inside / chunk_elements) * kMxfp4ChunkBlocks + inside % kMxfp4ChunkBlocks == block);
}

void plan(Reader& in) {
  const int64_t rows = in.take<int64_t>() >> in.take<uint8_t>() % 64;
  const int64_t out_features = in.take<int32_t>(), in_features = in.take<int32_t>();
  const int experts = in.take<int16_t>(), top_k = in.take<int8_t>(), sms = in.take<int16_t>();
  const int64_t tokens = in.take<int32_t>();
  try {
    const MoePath path = choose_moe_path(in.take<uint8_t>() % 2 == 0, tokens, top_k, experts);
    const int tile = moe_rows_per_tile(path);
    if (path == MoePath::decode_mma_mixed)
      check(tile == kMoeMixedTileRows);  // each expert's width chosen by the grouping
    else if (path == MoePath::prefill_wgmma_split)
      check(tile == kMoeSplitTileRows);  // 128-row tiles and, for an expert's few last rows, 32-row ones
    else
      check(tile == 8 || tile == 16 || tile == 32 || tile == 64 || tile == 128);
    check(parse_moe_path(moe_path_name(path)) == path);
  } catch (const Error&) {
  }
  try {
    check_moe_gemm_shape("fuzz", rows, out_features, in_features, experts);
  } catch (const Error&) {
    return;
  }
  for (int tile : {16, 32, 64}) {
    try {
      const MoeGrid decode = moe_decode_wgmma_grid(rows, tile, out_features, in_features, experts, sms);
      check(decode.blocks >= 0 && decode.blocks <= sms && (rows == 0) == (decode.blocks == 0));
      check(int64_t{decode.weight_tiles} * kMoeDecodeWgmmaWeightRows >= out_features);
    } catch (const Error&) {
    }
  }
  for (int tile : {8, 16, 32, 64}) {
    try {
      const MoeGrid decode = moe_decode_mma_grid(rows, tile, out_features, in_features, experts);
      check(decode.blocks >= 0 && decode.blocks <= 65535 && decode.blocks >= (rows + tile - 1) / tile);
      check(int64_t{decode.weight_tiles} * kMoeDecodeMmaWeightRows >= out_features);
      check(out_features * in_features / 2 < int64_t{1} << 31);
    } catch (const Error&) {
    }
  }
  // decode_mma_mixed's per-class grids: within the 8-row count of all tiles (what MoeBuffers holds), and holding
  // the tiles of an extreme split: every row in one expert.
  // (the bounds from the token count's bytes, so that the seeds' layout of the rest is unchanged)
  const int n8 = static_cast<int>(tokens & 0xff) + 1, n16 = n8 + static_cast<int>((tokens >> 8) & 0x1ff);
  const MoeMixedBounds bounds{n8, n16};
  for (int cls = 0; cls < 3; ++cls) {
    try {
      const int tiles = moe_mixed_class_max_tiles(rows, cls, bounds, experts);
      check(tiles >= 0 && tiles <= moe_max_tiles(rows, 8, experts));
      if (moe_mixed_tile_class(static_cast<int>(std::min<int64_t>(rows, 1 << 30)), bounds) == cls)
        check(tiles >= (rows + moe_mixed_class_rows(cls) - 1) / moe_mixed_class_rows(cls));
    } catch (const Error&) {
    }
  }
  // The split grouping's per-class bounds (its bound from the token count's next bits): within the 8-row count, and
  // holding the tiles of every row in one expert.
  const int split_max = static_cast<int>((tokens >> 17) & 0x7f);
  for (int cls = 0; cls < 2; ++cls) {
    try {
      const int tiles = moe_split_class_max_tiles(rows, cls, split_max, experts);
      check(tiles >= 0 && tiles <= moe_max_tiles(rows, 8, experts));
      if (rows <= 1 << 30) check(tiles >= moe_split_tiles(static_cast<int>(rows), split_max, cls));
    } catch (const Error&) {
    }
  }
  try {
    const MoeGrid prefill = moe_prefill_wgmma_grid(rows, out_features, in_features, experts, sms);
    check(prefill.blocks >= 0 && prefill.blocks <= sms && (rows == 0) == (prefill.blocks == 0));
    check(int64_t{prefill.weight_tiles} * kMoePrefillWgmmaTileN >= out_features);
    check(moe_max_tiles(rows, kMoePrefillTileRows, experts) >= (rows + kMoePrefillTileRows - 1) / kMoePrefillTileRows);
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const uint8_t words = in.take<uint8_t>() % 16;
  for (int i = 0; i < words && in.size >= 5; ++i) {
    const uint32_t word = in.take<uint32_t>();
    dequantise(word, in.take<uint8_t>());
  }
  tiled(in);
  plan(in);
  const std::string rest(reinterpret_cast<const char*>(in.data), in.size);
  try {
    parse_moe_path(rest);
  } catch (const Error&) {
  }
  try {
    const MoeMixedBounds parsed = parse_moe_mixed_bounds(rest);
    check(parsed.n8_max >= 1 && parsed.n8_max <= parsed.n16_max && parsed.n16_max <= 4096);
  } catch (const Error&) {
  }
  try {
    // A table that parses has increasing bounds, its last rule unbounded, and the choice is one of its paths.
    const MoePathTable table = parse_moe_path_table(rest);
    check(!table.empty() && std::isinf(table.back().max_rows_per_expert));
    for (size_t i = 1; i < table.size(); ++i) check(table[i].max_rows_per_expert > table[i - 1].max_rows_per_expert);
    const MoePath chosen = choose_moe_path(true, static_cast<int64_t>(rest.size()) * 37, 4, 128, table);
    check(std::any_of(table.begin(), table.end(), [&](const MoePathRule& r) { return r.path == chosen; }));
  } catch (const Error&) {
  }
  return 0;
}
