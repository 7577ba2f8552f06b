// bfloat16 <-> float conversions. bf16 is the top half of an IEEE float; the conversion to float is exact,
// the conversion from float rounds to nearest even (NaN stays NaN), as torch's .to(torch.bfloat16) does.
#pragma once

#include <bit>
#include <cstdint>

namespace moeserve {

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace moeserve
