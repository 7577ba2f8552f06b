// The dot product of an fp32 activation row with an FP8 e4m3 weight row and its block scales, in dot.h's
// canonical order: element k accumulates into lane k % 16 by fused multiply-add of x[k] and the dequantised weight
// (e4m3 value x its block's scale, rounded to fp32 as a dequantised checkpoint holds it). So it gives the same bits
// as dot_f32 over the dequantised row, for any batch and either projection path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/fp8_blocks.h"
#include "runner/cpu/dot.h"

namespace moeserve::cpu {

// scales: one per block_cols columns of the row.
inline float dot_fp8(const float* __restrict x, const uint8_t* __restrict w, const float* scales, int64_t block_cols,
                     int64_t K) {
  const auto& values = fp8_e4m3_values();
  float acc[kLanes] = {};
  for (int64_t begin = 0, b = 0; begin < K; begin += block_cols, ++b) {
    const float s = scales[b];
    const int64_t end = std::min(K, begin + block_cols);
    for (int64_t k = begin; k < end; ++k) acc[k % kLanes] = std::fma(x[k], values[w[k]] * s, acc[k % kLanes]);
  }
  return sum_lanes(acc);
}

// The row dequantised into fp32 (for the prefill path, which then uses dot_f32).
inline void expand_fp8_row(const uint8_t* w, const float* scales, int64_t block_cols, int64_t K, float* out) {
  const auto& values = fp8_e4m3_values();
  for (int64_t k = 0; k < K; ++k) out[k] = values[w[k]] * scales[k / block_cols];
}

}  // namespace moeserve::cpu
