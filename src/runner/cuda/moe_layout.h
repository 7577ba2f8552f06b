// The index algebra and the MXFP4 -> bf16 conversion shared by the wgmma expert GEMMs (moe_prefill_wgmma.cu,
// moe_decode_wgmma.cu). Plain functions callable on the host and the device, so that the CPU tests
// (tests/runner/moe_layout_test.cc) and the fuzz target check the same code the kernels run; on the host the two
// instructions used (prmt, mul.rn.bf16x2) are emulated from their PTX ISA definitions.
//
// MXFP4 (src/model/mxfp4.h): a 16-byte block holds 32 e2m1 values along K, value 2j in the low nibble of byte
// j; one E8M0 scale byte per block multiplies it by 2^(scale - 127).
#pragma once

#include <cstdint>
#include <cstring>

#include "runner/cuda/host_device.h"

namespace moeserve::cuda {

// ---- the two instructions -------------------------------------------------------------------------------------
// prmt.b32 d, a, b, c (generic form): byte i of d is byte c[4i+2:4i] of {b, a}, or that byte's sign replicated
// when c[4i+3] is set (PTX ISA 9.7.9.7).
MOESERVE_HD uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  const uint64_t source = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t control = (c >> (4 * i)) & 0xfu;
    uint32_t byte = static_cast<uint32_t>(source >> (8 * (control & 7u))) & 0xffu;
    if ((control & 8u) != 0) byte = (byte & 0x80u) != 0 ? 0xffu : 0u;
    d |= byte << (8 * i);
  }
  return d;
#endif
}

#if !defined(__CUDA_ARCH__)
// The product of two bf16 values rounded to nearest even, as mul.rn.bf16x2 does per half (subnormals kept). The
// float product of two bf16 values is exact (16 significant bits at most) unless it leaves the float range.
inline uint32_t bf16_multiply_host(uint32_t a, uint32_t b) {
  const uint32_t a_bits = a << 16, b_bits = b << 16;
  float fa, fb;
  std::memcpy(&fa, &a_bits, 4);
  std::memcpy(&fb, &b_bits, 4);
  const float product = fa * fb;
  uint32_t bits;
  std::memcpy(&bits, &product, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}
#endif

// a * b per bf16 half, rounded to nearest even; .rn keeps the compiler from fusing it into anything.
MOESERVE_HD uint32_t bf16x2_multiply(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return bf16_multiply_host(a & 0xffffu, b & 0xffffu) | bf16_multiply_host(a >> 16, b >> 16) << 16;
#endif
}

// ---- where an expert matrix's MXFP4 blocks and scales sit on the device ----------------------------------------------
// The checkpoint holds [rows][blocks_per_row], so a kernel walking K in chunks of 128 (4 blocks) for a slice of 256
// weight rows reads 64 bytes of each row 1,440 bytes apart (gpt-oss-120b, K = 2,880): streamed that way one layer's
// experts move at 67% of the read rate on an H100, the same bytes as contiguous runs at 100%
// (benchmarks/cuda/weight_stream_bench.cu, docs/PERF.md), and the decode kernels sat at that 66%. The device
// therefore holds each expert matrix tiled: slices of 256 rows (the last one shorter), each slice a run of chunks of
// 4 blocks, a chunk [slice rows][4 blocks] contiguous; a row's blocks are padded to whole chunks (the pad blocks
// and scales are zero and never read). Block (row, b) of an expert is element mxfp4_tiled_index(row, b) of its
// expert's blocks (16 bytes each) and of its scales (a byte each), so a chunk's scale bytes of one row are one
// aligned 32-bit word. The experts follow each other, mxfp4_padded_blocks(blocks_per_row) x rows blocks apart.
inline constexpr int kMxfp4SliceRows = 256;
inline constexpr int kMxfp4ChunkBlocks = 4;
MOESERVE_HD int mxfp4_padded_blocks(int blocks_per_row) { return (blocks_per_row + 3) & ~3; }
// The parts of the index that depend on the row alone: index = row_offset + chunk * chunk_stride + b % 4.
struct Mxfp4TiledRow {
  int64_t row_offset;    // the slice's first element + 4 x the row's place in its slice
  int64_t chunk_stride;  // 4 x the slice's rows
};
MOESERVE_HD Mxfp4TiledRow mxfp4_tiled_row(int64_t row, int64_t rows, int blocks_per_row) {
  const int64_t first = row - row % kMxfp4SliceRows;
  const int64_t slice_rows = rows - first < kMxfp4SliceRows ? rows - first : kMxfp4SliceRows;
  return {first * mxfp4_padded_blocks(blocks_per_row) + (row - first) * kMxfp4ChunkBlocks,
          slice_rows * kMxfp4ChunkBlocks};
}
MOESERVE_HD int64_t mxfp4_tiled_index(int64_t row, int block, int64_t rows, int blocks_per_row) {
  const Mxfp4TiledRow r = mxfp4_tiled_row(row, rows, blocks_per_row);
  return r.row_offset + (block / kMxfp4ChunkBlocks) * r.chunk_stride + block % kMxfp4ChunkBlocks;
}

// ---- MXFP4 -> bf16 -------------------------------------------------------------------------------------------
// An e2m1 nibble s e1 e0 m becomes the bf16 with bits 15 (s), 8 (e1), 7 (e0), 6 (m): its value times 2^-126 (code
// 001, 0.5, lands on the bf16 subnormal 2^-127; the others are normal), the same trick mxfp4_factor plays in fp32.
// The bf16's low byte e0 << 7 | m << 6 depends on the nibble's two low bits, its high byte s << 7 | e1 on the two
// high bits: eight distinct bytes in all, so one prmt over an 8-byte table builds two whole bf16 values when its
// four selector nibbles are (low index, 4 + high index) of each. The device therefore holds each 32-bit word of an
// MXFP4 block in a packed order (mxfp4_pack_word, applied once at upload) whose bit pairs are those selector
// indices: 4 prmt, 3 shifts and 2 logic operations make the word's 8 bf16 values, where the checkpoint's order
// needed 8 prmt, 4 shifts and 1 logic operation (decode_mma is bound by these integer instructions: docs/PERF.md).
//   Packed word: nibble 4q + 2h (h = 0, 1) holds in bits 2p..2p+1 the low index (e0 m) of value 2r + h, and nibble
// 4q + 2h + 1 its high index (s e1), where r = 2p + q (p: the pass, q: the selector half) is the output word.
inline constexpr uint32_t kMxfp4LowBytes = 0xc0804000u;   // table bytes 0-3: index e0 m = 00, 01, 10, 11
inline constexpr uint32_t kMxfp4HighBytes = 0x81800100u;  // table bytes 4-7: index s e1 = 00, 01, 10, 11
inline constexpr uint32_t kMxfp4SelectorHigh = 0x40404040u;  // selector bit 2 of the high-byte nibbles

// The checkpoint's word (value i in bits 4i..4i+3, MXFP4's order) in the device's packed order, and back.
MOESERVE_HD uint32_t mxfp4_pack_word(uint32_t word) {
  uint32_t packed = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t nibble = (word >> (4 * i)) & 0xfu;
    const int r = i / 2, h = i % 2, p = r / 2, q = r % 2;
    packed |= (nibble & 3u) << (4 * (4 * q + 2 * h) + 2 * p);
    packed |= (nibble >> 2) << (4 * (4 * q + 2 * h + 1) + 2 * p);
  }
  return packed;
}
MOESERVE_HD uint32_t mxfp4_unpack_word(uint32_t packed) {
  uint32_t word = 0;
  for (int i = 0; i < 8; ++i) {
    const int r = i / 2, h = i % 2, p = r / 2, q = r % 2;
    const uint32_t low = (packed >> (4 * (4 * q + 2 * h) + 2 * p)) & 3u;
    const uint32_t high = (packed >> (4 * (4 * q + 2 * h + 1) + 2 * p)) & 3u;
    word |= (high << 2 | low) << (4 * i);
  }
  return word;
}

// 2^(scale - 1) in both bf16 halves: times the values above gives value * 2^(scale - 127), exactly (e2m1 values
// have two significant bits and 2^-128, the smallest product, is a bf16 subnormal). Normal for scale bytes 0..128;
// the weight upload rejects larger ones (device_weights.cc).
MOESERVE_HD uint32_t mxfp4_scale_bf16x2(uint32_t scale) { return scale * 0x00800080u + 0x3f003f00u; }

// Four bf16x2 words from the 8 values of one packed 32-bit word of an MXFP4 block: out[i] holds the values of the
// checkpoint word's byte i (value 2i in the low half). `half` 0 gives out[0..1] (bytes 0, 1), `half` 1 gives
// out[2..3] (bytes 2, 3).
//   The conversion takes two of its constants (the prmt table's low bytes and the selectors' high bit) as values a
// thread holds in registers, made once by mxfp4_bf16_constants() before its loop: written as literals, ptxas (CUDA
// 13.0, sm_90a) moved the table from a uniform register into a register before nearly every prmt (an IMAD.U32) and,
// LOP3 taking one immediate, split each mask-and-or into two LOP3s: decode_mma's 8-row loop ran 413 instructions a
// chunk of 16 packed words, 337 with the constants held (13 a word were meant). On the device the values are loaded
// from global memory, which ptxas cannot fold (it saw through a shuffle of them: the SASS was unchanged).
struct Mxfp4Bf16Constants {
  uint32_t low_bytes = kMxfp4LowBytes;
  uint32_t selector_high = kMxfp4SelectorHigh;
};
// One copy a lane, each lane loading its own: with one copy the load's address is uniform, and in the grouped GEMM's
// producers (104 registers) ptxas kept the table in a uniform register and moved it into a register before every
// prmt again (ncu source counters, H100, 2026-12-06: ~48 MOV / IMAD.U32 from UR17 an own step beside 48 PRMT).
#if defined(__CUDACC__)
static __device__ __align__(8) uint32_t mxfp4_bf16_constant_words[32][2] = {
#define MOESERVE_MXFP4_WORDS {kMxfp4LowBytes, kMxfp4SelectorHigh}
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS,
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS,
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS,
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS,
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS,
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS,
    MOESERVE_MXFP4_WORDS, MOESERVE_MXFP4_WORDS};
#undef MOESERVE_MXFP4_WORDS
#endif
MOESERVE_HD Mxfp4Bf16Constants mxfp4_bf16_constants() {
#if defined(__CUDA_ARCH__)
  const uint2 words = __ldg(reinterpret_cast<const uint2*>(mxfp4_bf16_constant_words[threadIdx.x % 32]));
  return {words.x, words.y};
#else
  return {};
#endif
}

MOESERVE_HD void mxfp4_word_half_to_bf16(uint32_t packed, uint32_t factor, int half, const Mxfp4Bf16Constants& k,
                                        uint32_t& lo_byte_pair, uint32_t& hi_byte_pair) {
  const uint32_t selectors = ((packed >> (2 * half)) & 0x33333333u) | k.selector_high;
  lo_byte_pair = bf16x2_multiply(byte_permute(k.low_bytes, kMxfp4HighBytes, selectors), factor);
  hi_byte_pair = bf16x2_multiply(byte_permute(k.low_bytes, kMxfp4HighBytes, selectors >> 16), factor);
}
MOESERVE_HD void mxfp4_word_half_to_bf16(uint32_t packed, uint32_t factor, int half, uint32_t& lo_byte_pair,
                                        uint32_t& hi_byte_pair) {
  mxfp4_word_half_to_bf16(packed, factor, half, Mxfp4Bf16Constants{}, lo_byte_pair, hi_byte_pair);
}

MOESERVE_HD void mxfp4_word_to_bf16(uint32_t packed, uint32_t factor, const Mxfp4Bf16Constants& k,
                                   uint32_t (&out)[4]) {
  mxfp4_word_half_to_bf16(packed, factor, 0, k, out[0], out[1]);
  mxfp4_word_half_to_bf16(packed, factor, 1, k, out[2], out[3]);
}
MOESERVE_HD void mxfp4_word_to_bf16(uint32_t packed, uint32_t factor, uint32_t (&out)[4]) {
  mxfp4_word_to_bf16(packed, factor, Mxfp4Bf16Constants{}, out);
}

// FP8 activations (decode_mma's e4m3 path): an e2m1 value s e1 e0 m placed in an e4m3 byte as s 0 0 e1 e0 m 0 0
// is that value times 2^-6, exactly (exponent field e1 e0 is e - 1 + 7 - 6 for e >= 1; e = 0 is e4m3's subnormal
// m * 2^-7). So the bytes of a packed word (above: value i in byte i % 4, value i < 4 with m, e0 at bits 0, 1 and
// e1, s at 4, 5; value i >= 4 with them at 2, 3 and 6, 7) need a shift and two logic operations per four values;
// the block's scale 2^(s - 127), times 2^6, is applied to the fp32 product (mxfp4_scale_e4m3_factor).
MOESERVE_HD uint32_t mxfp4_packed_low_e4m3(uint32_t packed) {  // values 0-3 of the word, byte i = value i
  return ((packed << 2) & 0x8c8c8c8cu) | (packed & 0x10101010u);
}
MOESERVE_HD uint32_t mxfp4_packed_high_e4m3(uint32_t packed) {  // values 4-7, byte i = value 4 + i
  return (packed & 0x8c8c8c8cu) | ((packed >> 2) & 0x10101010u);
}
// 2^(scale - 121) as fp32 bits from four scale bytes with 6 already added to each (scale + 6 <= 134, so no byte
// carries): byte `which` of them moved to the exponent field.
MOESERVE_HD uint32_t mxfp4_scale_e4m3_factor_bits(uint32_t scales_plus_6, int which) {
  return byte_permute(scales_plus_6, 0u, 0x0444u | static_cast<uint32_t>(which) << 12) >> 1;
}
inline constexpr uint32_t kMxfp4E4m3ScaleBias = 0x06060606u;  // + 6 on each scale byte: 2^6 undoes the placement

// ---- MXFP4 -> e4m3 with the block scale folded in (the FP8 grouped GEMM, moe_prefill_wgmma.cu) ----------------------
// wgmma's FP8 k32 is one MXFP4 block, and nothing can scale a product between the instructions of one accumulator,
// so there the block's scale goes into the e4m3 exponents: a weight row whose largest block scale is s_max holds
// value v * 2^(s - 127) as the e4m3 value v * 2^(k - 6) with k = s - s_max + 12 (<= 12), and the row is scaled by
// 2^(s_max - 133) in the epilogue. Exact for k >= -2, i.e. wherever the row's block scales span at most 14 (e4m3's
// smallest subnormal is 2^-9: 0.5 * 2^(k - 6) needs k >= -2); below that the value is rounded to nearest even (the
// upload counts such rows). The byte of each of the eight e2m1 magnitudes (code e1 e0 m) for a given k is a table of
// 8 bytes that one prmt indexes; for k >= 1 it is the bit placement (code << 2: v * 2^-6) with k added to the
// exponent field, except code 1 (0.5), whose exponent field becomes k with a zero mantissa.
inline constexpr int kMxfp4E4m3MaxShift = 12;       // k of a row's largest block scale (6 * 2^(12 - 6) = 384 <= 448)
inline constexpr int kMxfp4E4m3RowExponentBias = 133;  // the row's factor is 2^(s_max - 133)
inline constexpr int kMxfp4E4m3ExactSpan = 14;      // rows whose scales span more are rounded
struct E4m3Table {
  uint32_t lo = 0, hi = 0;  // bytes 0-3 and 4-7: the e4m3 byte of codes 0..7 (positive)
};
// e4m3 (satfinite, round to nearest even) of a non-negative finite value: the table's slow path, rows of wide span.
MOESERVE_HD uint32_t e4m3_from_nonnegative(float v) {
  if (!(v > 0.0f)) return 0;
  if (v >= 448.0f) return 0x7eu;
  int exponent = 0;  // v = f * 2^exponent with f in [1, 2)
  float f = v;
  while (f >= 2.0f) f *= 0.5f, ++exponent;
  while (f < 1.0f) f *= 2.0f, --exponent;
  // Units of the last place: 2^(exponent - 3) for normals (exponent >= -6), 2^-9 below.
  const int ulp_exponent = exponent >= -6 ? exponent - 3 : -9;
  float units = v;
  for (int i = 0; i < -ulp_exponent; ++i) units *= 2.0f;  // exact: powers of two
  for (int i = 0; i < ulp_exponent; ++i) units *= 0.5f;
  uint32_t q = static_cast<uint32_t>(units);
  const float rest = units - static_cast<float>(q);
  if (rest > 0.5f || (rest == 0.5f && (q & 1u) != 0)) ++q;
  // q units of 2^ulp_exponent: normals have q in [8, 16] (16 carries into the next exponent), subnormals q < 8.
  if (ulp_exponent == -9 && q < 8) return q;
  int field = ulp_exponent + 3 + 7;
  if (q == 16) q = 8, ++field;
  if (field > 15 || (field == 15 && q - 8 == 7)) return 0x7eu;
  return static_cast<uint32_t>(field) << 3 | (q - 8);
}
MOESERVE_HD E4m3Table mxfp4_e4m3_table(int k) {
  E4m3Table t;
  if (k >= 1) {
    const uint32_t k8 = static_cast<uint32_t>(k) << 3;
    t.lo = 0x0c080000u + k8 * 0x01010100u;
    t.hi = 0x1c181410u + k8 * 0x01010101u;
    return t;
  }
  float factor = 1.0f;  // 2^(k - 6), exact
  for (int i = k; i < 6; ++i) factor *= 0.5f;
  for (int c = 1; c < 8; ++c) {  // code c's magnitude: 0.5 c below 2, else (2 + c % 2) 2^(c / 2 - 2)
    float magnitude = c < 2 ? 0.5f : static_cast<float>(2 + c % 2);
    for (int e = 2; e < c / 2; ++e) magnitude *= 2.0f;
    if (c >= 2 && c / 2 < 2) magnitude *= 0.5f;
    const uint32_t byte = e4m3_from_nonnegative(magnitude * factor);
    (c < 4 ? t.lo : t.hi) |= byte << (8 * (c % 4));
  }
  return t;
}
// The eight values of a packed word (above) as e4m3 bytes through block table t: out0 holds values 0-3, out1 values
// 4-7, byte i = value i (resp. 4 + i), the checkpoint's k order. From packed byte j: bits 0-1 and 2-3 are the low
// indices (e0 m) of values j and 4 + j, bits 4-5 and 6-7 their high indices (e1, s). Selector byte j gets the code
// e1 e0 m in its low nibble (bit 3 clear: no sign replication); prmt reads nibbles 0 and 2 of the low half (values 0
// and 1) into bytes 0 and 2, then of the half shifted by 12 (values 2, 3) into bytes 1 and 3, and a third prmt puts
// them in order; the sign bits (bit 5, resp. 7, of byte j) go on last. 16 integer instructions for 8 values.
MOESERVE_HD void mxfp4_packed_to_e4m3(uint32_t packed, E4m3Table t, uint32_t& out0, uint32_t& out1) {
  const uint32_t v = (packed >> 2) & 0x07070707u;  // bits 0-1: low index of value 4 + j; bit 2: e1 of value j
  const uint32_t sel0 = (packed & 0x03030303u) | (v & 0x04040404u);
  const uint32_t sel1 = (v & 0x03030303u) | ((packed >> 4) & 0x04040404u);
  const uint32_t m0 = byte_permute(byte_permute(t.lo, t.hi, sel0), byte_permute(t.lo, t.hi, sel0 >> 12), 0x7520u);
  const uint32_t m1 = byte_permute(byte_permute(t.lo, t.hi, sel1), byte_permute(t.lo, t.hi, sel1 >> 12), 0x7520u);
  out0 = m0 | ((packed << 2) & 0x80808080u);
  out1 = m1 | (packed & 0x80808080u);
}

// ---- shared-memory tiles for wgmma --------------------------------------------------------------------------------
// A K-major bf16 tile of rows x 64 k in the 128-byte swizzle: row r at byte 128 r, its 16-byte chunk c (k 8c .. 8c+7)
// at chunk c ^ (r % 8). wgmma applies the same XOR to address bits [4:6] with bits [7:9], so the tile must start
// on a 1024-byte boundary (PTX ISA 9.7.15.5.1.2, Swizzle<3,4,3>).
inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kSwizzleAtomBytes = 1024;
MOESERVE_HD uint32_t swizzled_chunk_offset(uint32_t row, uint32_t chunk) {
  return row * kSwizzleRowBytes + ((chunk ^ (row & 7u)) << 4);
}

// The wgmma shared-memory matrix descriptor of such a tile (PTX ISA 9.7.15.5.1.2.2): start address >> 4 in bits
// 0-13, leading byte offset (unused for swizzled K-major; 1 by convention) in 16-29, stride byte offset (the 1024
// bytes between 8-row groups) >> 4 in 32-45, swizzle mode 1 (128 bytes) in 62-63, base offset 0 (aligned atoms).
// Moving along K inside the 128-byte row is a start address 32 bytes on per k16 slab.
MOESERVE_HD uint64_t sw128_descriptor(uint32_t shared_byte_address) {
  return static_cast<uint64_t>((shared_byte_address & 0x3ffffu) >> 4) | static_cast<uint64_t>(1) << 16 |
         static_cast<uint64_t>(kSwizzleAtomBytes >> 4) << 32 | static_cast<uint64_t>(1) << 62;
}

// ---- the decode-regime kernel's operands (moe_decode_wgmma.cu) ------------------------------------------------------
// There the weights are wgmma's A operand, dequantised into registers. A thread (lane g = lane / 4, c = lane % 4) of
// a warp holds, per k16 slab, the k pairs c and c + 4 (PTX ISA figure "WGMMA .m64nNk16 register fragment layout
// for matrix A"; CuTe's ALayout_64x16). It reads one 32-bit word of an MXFP4 block, word c: pairs 4c .. 4c + 3 of
// the block's 32 values. So the k order inside each block is permuted, the same for both operands: word byte t
// of thread c feeds slab t / 2, pair c + 4 (t % 2). The activations (B operand, from shared memory) are copied pair
// by pair into the matching positions. Block pair p (values 2p, 2p + 1) therefore sits at slab (p / 2) % 2, pair
// 4 (p % 2) + p / 4 of its block's k16 slab pair.
MOESERVE_HD uint32_t permuted_pair_slab(uint32_t pair) { return (pair >> 1) & 1u; }
MOESERVE_HD uint32_t permuted_pair_index(uint32_t pair) { return 4u * (pair & 1u) + (pair >> 2); }

// Byte offset, inside the activation tile of a 128-k step (two 64-k swizzled sub-tiles of tile_rows rows, block
// b's k in sub-tile b / 2), of pair p (0..15) of MXFP4 block b (0..3) of token row n.
MOESERVE_HD uint32_t activation_pair_offset(uint32_t tile_rows, uint32_t row, uint32_t block, uint32_t pair) {
  const uint32_t slab = 2u * (block % 2u) + permuted_pair_slab(pair), index = permuted_pair_index(pair);
  return (block / 2u) * tile_rows * kSwizzleRowBytes + swizzled_chunk_offset(row, 2u * slab + index / 4u) +
         4u * (index % 4u);
}

// Weight rows are ordered in the A operand so that SwiGLU's gate and up rows (2j, 2j + 1) land in the same
// thread: accumulator rows m and m + 8 of each 16-row warp slab (fragment rows g and g + 8). Position m (0..63)
// of a 64-row block holds weight row 2 (8 (m / 16) + m % 8) + (m / 8) % 2; without SwiGLU, row m.
MOESERVE_HD uint32_t block_weight_row(uint32_t m, bool swiglu) {
  return swiglu ? 2u * (8u * (m / 16u) + m % 8u) + (m / 8u) % 2u : m;
}

}  // namespace moeserve::cuda
