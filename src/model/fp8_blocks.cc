#include "model/fp8_blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moeserve {

const std::array<float, 256>& fp8_e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) {
      const int exponent = (b >> 3) & 0xF;
      const int mantissa = b & 0x7;
      float magnitude;
      if (exponent == 0xF && mantissa == 0x7)
        magnitude = std::numeric_limits<float>::quiet_NaN();
      else if (exponent == 0)
        magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m / 8 * 2^-6
      else
        magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1 + m / 8) * 2^(e - 7)
      t[b] = (b & 0x80) ? -magnitude : magnitude;
    }
    return t;
  }();
  return table;
}

uint8_t float_to_fp8_e4m3(float value) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::fabs(value);
  if (magnitude >= kFp8E4m3Max) return sign | 0x7E;
  // The largest code whose value is <= magnitude (codes 0..0x7E increase with their value), then round to
  // nearest by the midpoint to the next one; the values are short binary fractions, so the midpoint and the
  // comparisons are exact. Ties go to the even code.
  const auto& values = fp8_e4m3_values();
  const int low = static_cast<int>(std::upper_bound(values.begin(), values.begin() + 0x7F, magnitude) - values.begin()) - 1;
  if (values[low] == magnitude) return sign | static_cast<uint8_t>(low);
  const float midpoint = (values[low] + values[low + 1]) * 0.5f;
  const int chosen = magnitude < midpoint ? low : (magnitude > midpoint ? low + 1 : (low % 2 == 0 ? low : low + 1));
  return sign | static_cast<uint8_t>(chosen);
}

}  // namespace moeserve
