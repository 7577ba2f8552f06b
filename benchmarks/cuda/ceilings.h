// The ceilings the CUDA benchmarks set their figures against, measured on the GPU they run on.
#pragma once

#include <cuda_runtime.h>

#include "runner/cuda/cuda_check.h"

namespace moeserve::cuda_bench {

// Mean microseconds of `reps` calls of launch() on the default stream (CUDA events), after `warmups` calls.
template <typename F>
double event_time_us(F&& launch, int reps, int warmups = 1) {
  for (int i = 0; i < warmups; ++i) launch();
  cudaEvent_t start, stop;
  MOESERVE_CUDA_CHECK(cudaEventCreate(&start));
  MOESERVE_CUDA_CHECK(cudaEventCreate(&stop));
  MOESERVE_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < reps; ++i) launch();
  MOESERVE_CUDA_CHECK(cudaEventRecord(stop));
  MOESERVE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / reps;
}

struct Ceilings {
  double copy_bytes_per_s = 0;  // device-to-device copy of 4 GiB: bytes read + written
  double bf16_flops_per_s = 0;  // cuBLASLt bf16 8192^3 matrix product on random data
};

Ceilings measure_ceilings();

}  // namespace moeserve::cuda_bench
