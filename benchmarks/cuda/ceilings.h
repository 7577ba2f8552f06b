// The ceilings the CUDA benchmarks set their figures against, measured on the GPU they run on.
#pragma once

namespace moeserve::cuda_bench {

struct Ceilings {
  double copy_bytes_per_s = 0;  // device-to-device copy of 4 GiB: bytes read + written
  double bf16_flops_per_s = 0;  // cuBLASLt bf16 8192^3 matrix product on random data
};

Ceilings measure_ceilings();

}  // namespace moeserve::cuda_bench
