// The wgmma expert GEMMs' index algebra and MXFP4 conversion (runner/cuda/moe_layout.h), on the CPU: the same
// functions the kernels run, with the two instructions emulated from the PTX ISA. The hardware side is modelled
// from the PTX ISA too: wgmma reads a K-major 128-byte-swizzled operand at start + (n / 8) SBO + (n % 8) 128 +
// 2 k, address bits [4:6] XOR bits [7:9] (9.7.15.5.1.2); A register r of lane (g, c) holds row g + 8 (r % 2),
// k 2c + 8 (r / 2) + {0, 1} of its warp's 16 rows (CuTe's ALayout_64x16). The kernels themselves are checked
// against cpu::expert_linear on a GPU (tests/runner/cuda/moe_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "model/mxfp4.h"
#include "runner/cuda/moe_layout.h"
#include "util/bfloat16.h"

namespace moeserve::cuda {
namespace {

// Where wgmma reads element (row n, k) of a k16 slab whose descriptor is `descriptor`.
uint32_t wgmma_address(uint64_t descriptor, uint32_t n, uint32_t k) {
  EXPECT_EQ(descriptor >> 62, 1u) << "128-byte swizzle";
  EXPECT_EQ((descriptor >> 49) & 7u, 0u) << "base offset";
  const uint32_t start = static_cast<uint32_t>(descriptor & 0x3fffu) << 4;
  const uint32_t stride = static_cast<uint32_t>((descriptor >> 32) & 0x3fffu) << 4;
  const uint32_t address = start + (n / 8) * stride + (n % 8) * 128 + 2 * k;
  return address ^ (((address >> 7) & 7u) << 4);
}

TEST(MoeLayout, BytePermuteFollowsThePtxDefinition) {
  EXPECT_EQ(byte_permute(0x33221100u, 0x77665544u, 0x3210u), 0x33221100u);
  EXPECT_EQ(byte_permute(0x33221100u, 0x77665544u, 0x7654u), 0x77665544u);
  EXPECT_EQ(byte_permute(0x33221100u, 0x77665544u, 0x0415u), 0x00441155u);
  // Selector bit 3 replicates the selected byte's sign bit.
  EXPECT_EQ(byte_permute(0x7f80u, 0u, 0x4498u), 0x000000ffu);
  EXPECT_EQ(byte_permute(0x7f80u, 0u, 0x4409u), 0x00008000u);
}

TEST(MoeLayout, Bf16MultiplyRoundsToNearestEvenAndKeepsSubnormals) {
  // 1.5 * 1.5 = 2.25 exactly; 2^-127 (subnormal) * 2^-1 = 2^-128 (subnormal); 1 + 2^-7 squared rounds to even.
  EXPECT_EQ(bf16x2_multiply(0x3fc0u, 0x3fc0u) & 0xffffu, 0x4010u);
  EXPECT_EQ(bf16x2_multiply(0x0040u, 0x3f00u) & 0xffffu, 0x0020u);
  EXPECT_EQ(bf16x2_multiply(0x3f81u, 0x3f81u) & 0xffffu, 0x3f82u);
  EXPECT_EQ(bf16x2_multiply(0x3fc0u << 16, 0x4000u << 16) >> 16, 0x4040u);
}

// Every byte value at every position of a word, at every scale the upload accepts (0..128): each of the eight
// bf16 values of the packed word equals the e2m1 value times 2^(scale - 127) exactly, in the checkpoint's order
// (low nibble first).
TEST(MoeLayout, Mxfp4WordsBecomeTheExactBf16Values) {
  std::mt19937 rng(7);
  for (uint32_t scale = 0; scale <= 128; ++scale) {
    const float factor = e8m0_to_float(static_cast<uint8_t>(scale));
    for (int position = 0; position < 4; ++position)
      for (uint32_t byte = 0; byte < 256; ++byte) {
        const uint32_t word = (static_cast<uint32_t>(rng()) & ~(0xffu << (8 * position))) | byte << (8 * position);
        uint32_t out[4];
        mxfp4_word_to_bf16(mxfp4_pack_word(word), mxfp4_scale_bf16x2(scale), out);
        for (int value = 0; value < 8; ++value) {
          const uint32_t nibble = (word >> (4 * value)) & 0xfu;
          const uint16_t expected = float_to_bf16(kFp4Values[nibble] * factor);
          const uint16_t got = static_cast<uint16_t>(out[value / 2] >> (16 * (value % 2)));
          ASSERT_EQ(got, expected) << "scale " << scale << " word " << std::hex << word << " value " << value;
        }
      }
  }
}

// e4m3 (OCP FP8 E4M3, NVIDIA's e4m3): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent field 0 is
// subnormal (m / 8 * 2^-6); 0x7f / 0xff are NaN.
double e4m3_value(uint8_t byte) {
  const int sign = byte >> 7, exponent = (byte >> 3) & 0xf, mantissa = byte & 7;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// FP8 activations: every value of a packed word, at every place, becomes the e4m3 byte of its e2m1 value times
// 2^-6 (values 0-3 from the low conversion, 4-7 from the high one, byte i holding value i, resp. 4 + i), and
// the block factor is 2^(scale - 121) for every scale the upload accepts, from any byte of the word.
TEST(MoeLayout, Mxfp4WordsBecomeExactE4m3BytesAndFactors) {
  std::mt19937 rng(13);
  for (int position = 0; position < 4; ++position)
    for (uint32_t byte = 0; byte < 256; ++byte)
      for (int trial = 0; trial < 8; ++trial) {
        const uint32_t word = (static_cast<uint32_t>(rng()) & ~(0xffu << (8 * position))) | byte << (8 * position);
        const uint32_t packed = mxfp4_pack_word(word);
        const uint32_t low = mxfp4_packed_low_e4m3(packed), high = mxfp4_packed_high_e4m3(packed);
        for (int value = 0; value < 8; ++value) {
          const uint32_t nibble = (word >> (4 * value)) & 0xfu;
          const uint8_t got = static_cast<uint8_t>((value < 4 ? low : high) >> (8 * (value % 4)));
          ASSERT_EQ(e4m3_value(got), std::ldexp(static_cast<double>(kFp4Values[nibble]), -6))
              << "word " << std::hex << word << " value " << value << " byte " << int{got};
          ASSERT_EQ(got >> 7, nibble >> 3) << "sign of value " << value << " of " << std::hex << word;  // -0 too
        }
      }
  for (uint32_t scale = 0; scale <= 128; ++scale)
    for (int which = 0; which < 4; ++which) {
      const uint32_t others = static_cast<uint32_t>(rng()) % 129u * 0x01010101u;  // other bytes, also <= 128
      const uint32_t scales = (others & ~(0xffu << (8 * which))) | scale << (8 * which);
      const float factor = std::bit_cast<float>(mxfp4_scale_e4m3_factor_bits(scales + kMxfp4E4m3ScaleBias, which));
      ASSERT_EQ(factor, std::ldexp(1.0f, static_cast<int>(scale) - 121)) << "scale " << scale << " byte " << which;
      ASSERT_EQ(static_cast<double>(factor) * std::ldexp(1.0, -6), e8m0_to_float(static_cast<uint8_t>(scale)));
    }
}

// The nearest e4m3 byte (0 .. 0x7e) to a non-negative value by search over every finite value, ties to the even
// byte (an even mantissa); 448 and above saturate. The oracle for the FP8 grouped GEMM's weight conversion.
uint8_t nearest_e4m3(double v) {
  uint8_t best = 0;
  for (int byte = 1; byte <= 0x7e; ++byte) {
    const double d = std::abs(e4m3_value(static_cast<uint8_t>(byte)) - v), b = std::abs(e4m3_value(best) - v);
    if (d < b || (d == b && (byte & 1) == 0)) best = static_cast<uint8_t>(byte);
  }
  return best;
}

TEST(MoeLayout, E4m3EncoderRoundsToNearestEvenAndSaturates) {
  for (int byte = 0; byte <= 0x7e; ++byte) {
    const double v = e4m3_value(static_cast<uint8_t>(byte));
    ASSERT_EQ(e4m3_from_nonnegative(static_cast<float>(v)), static_cast<uint32_t>(byte)) << v;
    if (byte < 0x7e) {  // the midpoint to the next value, and just either side of it
      const double next = e4m3_value(static_cast<uint8_t>(byte + 1)), mid = (v + next) / 2;
      for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e9)})
        ASSERT_EQ(e4m3_from_nonnegative(static_cast<float>(x)), nearest_e4m3(static_cast<float>(x))) << x;
    }
  }
  EXPECT_EQ(e4m3_from_nonnegative(448.0f), 0x7eu);
  EXPECT_EQ(e4m3_from_nonnegative(1e30f), 0x7eu);
  EXPECT_EQ(e4m3_from_nonnegative(464.0f), 0x7eu);  // past 448: satfinite, never NaN
  EXPECT_EQ(e4m3_from_nonnegative(std::ldexp(1.0f, -11)), 0u);
  EXPECT_EQ(e4m3_from_nonnegative(0.0f), 0u);
}

// The block tables: code c (e1 e0 m) at shift k gives the nearest e4m3 of its e2m1 magnitude times 2^(k - 6), exactly
// that value for k >= -2 (a row whose scales span up to 14), through the fast formula for k >= 1.
TEST(MoeLayout, E4m3TablesHoldTheScaledMagnitudes) {
  for (int k = -24; k <= kMxfp4E4m3MaxShift; ++k) {
    const E4m3Table t = mxfp4_e4m3_table(k);
    for (int c = 0; c < 8; ++c) {
      const uint8_t got = static_cast<uint8_t>((c < 4 ? t.lo : t.hi) >> (8 * (c % 4)));
      const double want = std::ldexp(static_cast<double>(kFp4Values[c]), k - 6);
      ASSERT_EQ(got, nearest_e4m3(want)) << "k " << k << " code " << c;
      if (k >= kMxfp4E4m3MaxShift - kMxfp4E4m3ExactSpan) {
        ASSERT_EQ(e4m3_value(got), want) << "k " << k << " code " << c;
      }
    }
  }
}

// Every byte at every position of a word, at shifts across the exact range and below it: each of the eight e4m3
// bytes is its value's table byte with the value's sign, in the checkpoint's order.
TEST(MoeLayout, Mxfp4WordsBecomeScaledE4m3Bytes) {
  std::mt19937 rng(17);
  for (int k = -4; k <= kMxfp4E4m3MaxShift; ++k) {
    const E4m3Table t = mxfp4_e4m3_table(k);
    for (int position = 0; position < 4; ++position)
      for (uint32_t byte = 0; byte < 256; ++byte)
        for (int trial = 0; trial < 2; ++trial) {
          const uint32_t word = (static_cast<uint32_t>(rng()) & ~(0xffu << (8 * position))) | byte << (8 * position);
          uint32_t out0 = 0, out1 = 0;
          mxfp4_packed_to_e4m3(mxfp4_pack_word(word), t, out0, out1);
          for (int value = 0; value < 8; ++value) {
            const uint32_t nibble = (word >> (4 * value)) & 0xfu;
            const uint8_t got = static_cast<uint8_t>((value < 4 ? out0 : out1) >> (8 * (value % 4)));
            const uint8_t magnitude = static_cast<uint8_t>(((nibble & 7u) < 4 ? t.lo : t.hi) >> (8 * (nibble & 3u)));
            ASSERT_EQ(got, magnitude | (nibble & 8u) << 4)
                << "k " << k << " word " << std::hex << word << " value " << value;
          }
        }
  }
}

// The device's packed order is a permutation of the word's 32 bits: each bit lands on its own place, and unpacking
// undoes it.
TEST(MoeLayout, PackedWordsPermuteTheBitsAndUnpackBack) {
  std::set<uint32_t> images;
  for (int bit = 0; bit < 32; ++bit) {
    const uint32_t packed = mxfp4_pack_word(1u << bit);
    ASSERT_EQ(std::popcount(packed), 1) << "bit " << bit;
    images.insert(packed);
    EXPECT_EQ(mxfp4_unpack_word(packed), 1u << bit);
  }
  EXPECT_EQ(images.size(), 32u);
  std::mt19937 rng(11);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t word = static_cast<uint32_t>(rng());
    ASSERT_EQ(mxfp4_unpack_word(mxfp4_pack_word(word)), word);
  }
}

// Both prefill operands are written in natural k order, chunk by chunk, into swizzled tiles: wgmma's read of
// (row n, k) of slab k16 must find what the producer stored for (n, 16 k16 + k).
TEST(MoeLayout, PrefillTilesReadBackThroughTheDescriptor) {
  const uint32_t base = 3 * kSwizzleAtomBytes;
  for (uint32_t rows : {64u, 192u}) {
    std::map<uint32_t, std::pair<uint32_t, uint32_t>> stored;  // address -> (row, k)
    for (uint32_t row = 0; row < rows; ++row)
      for (uint32_t chunk = 0; chunk < 8; ++chunk)
        for (uint32_t i = 0; i < 8; ++i)
          ASSERT_TRUE(stored.emplace(base + swizzled_chunk_offset(row, chunk) + 2 * i, std::pair{row, 8 * chunk + i}).second);
    for (uint32_t k16 = 0; k16 < 4; ++k16) {
      const uint64_t descriptor = sw128_descriptor(base + 32 * k16);
      for (uint32_t n = 0; n < rows; ++n)
        for (uint32_t k = 0; k < 16; ++k) {
          const auto it = stored.find(wgmma_address(descriptor, n, k));
          ASSERT_NE(it, stored.end());
          EXPECT_EQ(it->second, (std::pair{n, 16 * k16 + k})) << "rows " << rows << " k16 " << k16;
        }
    }
  }
}

// The decode kernel's A registers (one word of an MXFP4 block per thread and row) and its B tile (activation
// pairs placed by activation_pair_offset, two 64-k sub-tiles per 128-k step) must pair the same actual k at every
// logical k, and cover each (row, k) of the step exactly once.
TEST(MoeLayout, DecodeOperandsAgreeOnEveryK) {
  const uint32_t base = kSwizzleAtomBytes;
  for (uint32_t tile_rows : {16u, 32u, 64u}) {
    std::map<uint32_t, uint32_t> stored;  // address -> actual k of the step, for token row n
    const uint32_t n = tile_rows - 3;
    for (uint32_t block = 0; block < 4; ++block)
      for (uint32_t pair = 0; pair < 16; ++pair)
        for (uint32_t e = 0; e < 2; ++e)
          ASSERT_TRUE(stored.emplace(base + activation_pair_offset(tile_rows, n, block, pair) + 2 * e,
                                     32 * block + 2 * pair + e).second);
    std::set<std::pair<uint32_t, uint32_t>> covered;  // (row m, actual k)
    for (uint32_t warp = 0; warp < 4; ++warp)
      for (uint32_t lane = 0; lane < 32; ++lane) {
        const uint32_t g = lane / 4, c = lane % 4;
        for (uint32_t block = 0; block < 4; ++block)
          for (uint32_t half = 0; half < 2; ++half) {
            const uint32_t k16 = 2 * block + half;
            // The kernel's descriptor for slab k16: sub-tile k16 / 4, 32 bytes a slab inside it.
            const uint64_t descriptor = sw128_descriptor(base + (k16 / 4) * tile_rows * kSwizzleRowBytes + 32 * (k16 % 4));
            for (uint32_t r = 0; r < 4; ++r)
              for (uint32_t e = 0; e < 2; ++e) {
                const uint32_t m = 16 * warp + g + 8 * (r % 2), logical_k = 2 * c + 8 * (r / 2) + e;
                // Register r comes from byte 2 half + r / 2 of word c (mxfp4_word_half_to_bf16's two outputs).
                const uint32_t byte = 4 * c + 2 * half + r / 2, weight_k = 32 * block + 2 * byte + e;
                const auto it = stored.find(wgmma_address(descriptor, n, logical_k));
                ASSERT_NE(it, stored.end());
                EXPECT_EQ(it->second, weight_k) << "rows " << tile_rows << " warp " << warp << " lane " << lane
                                                << " k16 " << k16 << " r " << r;
                EXPECT_TRUE(covered.emplace(m, weight_k).second);
              }
          }
      }
    EXPECT_EQ(covered.size(), 64u * 128u);
  }
}

TEST(MoeLayout, SwigluRowsPairInOneThread) {
  std::set<uint32_t> rows;
  for (uint32_t m = 0; m < 64; ++m) {
    rows.insert(block_weight_row(m, true));
    EXPECT_EQ(block_weight_row(m, false), m);
  }
  EXPECT_EQ(rows.size(), 64u);
  EXPECT_EQ(*rows.rbegin(), 63u);
  // Fragment rows g and g + 8 of warp slab w: gate 2j and up 2j + 1 of the same j.
  for (uint32_t w = 0; w < 4; ++w)
    for (uint32_t g = 0; g < 8; ++g) {
      const uint32_t gate = block_weight_row(16 * w + g, true), up = block_weight_row(16 * w + g + 8, true);
      EXPECT_EQ(gate % 2, 0u);
      EXPECT_EQ(up, gate + 1);
    }
}

// The tiled weight layout (moe_layout.h): every (row, block) of an expert lands on its own element inside the
// expert's rows x padded-blocks, each chunk of a slice is one contiguous run [slice rows][4 blocks] in row order, the
// chunks of a slice follow each other, and the slices follow each other; shapes with a short last slice and a
// partial last chunk included (gpt-oss-120b's 5,760 and 2,880 rows of 90 blocks, the tiny model's).
TEST(MoeLayout, TiledWeightsCoverEveryBlockOnceInContiguousChunks) {
  for (const auto& [rows, blocks_per_row] : {std::pair<int64_t, int>{5760, 90}, {2880, 90}, {256, 4}, {64, 2},
                                           {300, 5}, {257, 1}, {1, 3}, {512, 8}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows x " << blocks_per_row << " blocks");
    const int padded = mxfp4_padded_blocks(blocks_per_row);
    ASSERT_EQ(padded % kMxfp4ChunkBlocks, 0);
    ASSERT_GE(padded, blocks_per_row);
    ASSERT_LT(padded - blocks_per_row, kMxfp4ChunkBlocks);
    std::vector<int> seen(static_cast<size_t>(rows * padded), 0);
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t first = row - row % kMxfp4SliceRows;
      const int64_t slice_rows = std::min<int64_t>(kMxfp4SliceRows, rows - first);
      const Mxfp4TiledRow tiled = mxfp4_tiled_row(row, rows, blocks_per_row);
      EXPECT_EQ(tiled.chunk_stride, slice_rows * kMxfp4ChunkBlocks);
      for (int b = 0; b < blocks_per_row; ++b) {
        const int64_t index = mxfp4_tiled_index(row, b, rows, blocks_per_row);
        ASSERT_GE(index, 0);
        ASSERT_LT(index, rows * padded);
        ++seen[static_cast<size_t>(index)];
        // Chunk c of the slice starts c x (slice rows x 4) after the slice's first element, rows in order.
        const int64_t expected = first * padded + (b / kMxfp4ChunkBlocks) * slice_rows * kMxfp4ChunkBlocks +
                                 (row - first) * kMxfp4ChunkBlocks + b % kMxfp4ChunkBlocks;
        ASSERT_EQ(index, expected);
        // A chunk's scale bytes of one row are one aligned 32-bit word.
        ASSERT_EQ((index - b % kMxfp4ChunkBlocks) % 4, 0);
      }
    }
    // No element holds two blocks (the pads are the only ones left unused).
    EXPECT_EQ(*std::max_element(seen.begin(), seen.end()), 1);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), rows * blocks_per_row);
  }
}

}  // namespace
}  // namespace moeserve::cuda
