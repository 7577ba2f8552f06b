// MXFP4 (OCP microscaling FP4): blocks of 32 e2m1 values along the input dimension, 16 bytes per block
// (element 2j in the low nibble of byte j, 2j+1 in the high nibble) and one E8M0 scale byte per block
// (value * 2^(scale - 127)). The layout of GPT-OSS checkpoints: blocks [E, rows, K/32, 16], scales [E, rows, K/32].
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace moeserve {

inline constexpr int kMxfp4BlockSize = 32;
inline constexpr int kMxfp4BlockBytes = 16;

// e2m1 values by nibble: bit 3 is the sign.
inline constexpr std::array<float, 16> kFp4Values = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(scale - 127) as a float, built from its bits: exact for every byte (2^-127 is subnormal at 0; 255 gives
// infinity, as torch.ldexp(1, 128) does).
inline float e8m0_to_float(uint8_t scale) {
  return std::bit_cast<float>(scale == 0 ? uint32_t{0x00400000} : static_cast<uint32_t>(scale) << 23);
}

// Dequantises one row of `cols` values (cols a multiple of 32).
void mxfp4_dequantize_row(const uint8_t* blocks, const uint8_t* scales, int64_t cols, float* out);

}  // namespace moeserve
