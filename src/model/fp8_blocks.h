// FP8 e4m3 weights with block scales, the format of DeepSeek-V3/R1 checkpoints (README_WEIGHTS.md of
// deepseek-ai/DeepSeek-V3; inference/kernel.py weight_dequant): a [rows, cols] weight is stored as F8_E4M3 bytes
// and a float32 tensor `<name>_scale_inv` of [ceil(rows / B), ceil(cols / B)] (B = 128, the config's
// weight_block_size), and W[i, j] = e4m3(W_q[i, j]) * scale_inv[i / B, j / B]. Despite its name the scale is the
// dequantisation multiplier. A partial last block (kv_a_proj_with_mqa's 576 rows) has a scale of its own.
//
// e4m3 here is OCP's "fn" variant (torch.float8_e4m3fn): sign, 4 exponent bits with bias 7, 3 mantissa bits, no
// infinities, S.1111.111 is NaN, largest magnitude 448.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace moeserve {

inline constexpr float kFp8E4m3Max = 448.0f;

// The 256 e4m3fn values by byte (NaN for 0x7F and 0xFF), each exact in float.
const std::array<float, 256>& fp8_e4m3_values();
inline float fp8_e4m3_to_float(uint8_t byte) { return fp8_e4m3_values()[byte]; }

// Rounds a float to the nearest e4m3fn byte (ties to even), saturating at +-448 (a quantiser that divides by
// amax / 448 exceeds it only by rounding); NaN stays NaN.
uint8_t float_to_fp8_e4m3(float value);

// A [rows, cols] weight in e4m3 with its block scales. data points into the mapped checkpoint; the scales are
// held as floats (they are few: one per block_rows x block_cols weights).
struct Fp8BlockMatrix {
  const uint8_t* data = nullptr;  // [rows, cols]
  std::vector<float> scales;      // [scale_rows(), scale_cols()]
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t block_rows = 128;
  int64_t block_cols = 128;

  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  const uint8_t* row(int64_t r) const { return data + r * cols; }
  // The scales of row r, one per block of block_cols columns.
  const float* row_scales(int64_t r) const { return scales.data() + (r / block_rows) * scale_cols(); }
  // Element (r, c) dequantised: the single definition the CPU runner and the tests agree on.
  float at(int64_t r, int64_t c) const { return fp8_e4m3_to_float(row(r)[c]) * row_scales(r)[c / block_cols]; }
};

}  // namespace moeserve
