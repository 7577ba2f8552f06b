#include "model/mxfp4.h"

namespace moeserve {

void mxfp4_dequantize_row(const uint8_t* blocks, const uint8_t* scales, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kMxfp4BlockSize; ++b) {
    float scale = e8m0_to_float(scales[b]);
    const uint8_t* block = blocks + b * kMxfp4BlockBytes;
    float* dst = out + b * kMxfp4BlockSize;
    for (int j = 0; j < kMxfp4BlockBytes; ++j) {
      dst[2 * j] = kFp4Values[block[j] & 0x0F] * scale;
      dst[2 * j + 1] = kFp4Values[block[j] >> 4] * scale;
    }
  }
}

}  // namespace moeserve
