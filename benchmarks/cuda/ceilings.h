// The ceilings CUDA benchmarks set their figures beside, measured by the same process each run: device-to-device
// copy bandwidth (bytes read + written, 4 GiB buffers) and the cuBLASLt bf16 matrix-product rate (8192^3, random
// operands, fp32 accumulation).
#pragma once

namespace moeserve {

struct Ceilings {
  double copy_bytes_per_s = 0;  // bytes read + written
  double bf16_flops_per_s = 0;
};

Ceilings measure_ceilings();

}  // namespace moeserve
