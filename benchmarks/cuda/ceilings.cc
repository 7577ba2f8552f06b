#include "ceilings.h"

#include "runner/cuda/blas.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"

namespace moeserve {

Ceilings measure_ceilings() {
  Ceilings c;
  const size_t bytes = size_t{4} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::launch_fill_bytes(nullptr, a.as<uint8_t>(), bytes, 1);
  cudaEvent_t start, stop;
  MOESERVE_CUDA_CHECK(cudaEventCreate(&start));
  MOESERVE_CUDA_CHECK(cudaEventCreate(&stop));
  auto time_ms = [&](auto&& body, int reps) {
    body();
    MOESERVE_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < reps; ++i) body();
    MOESERVE_CUDA_CHECK(cudaEventRecord(stop));
    MOESERVE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms / reps;
  };
  const float copy_ms = time_ms([&] { MOESERVE_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); }, 10);
  c.copy_bytes_per_s = 2.0 * bytes / (copy_ms * 1e-3);
  const int64_t n = 8192;
  cuda::DeviceBuffer x(n * n * 2), w(n * n * 2), y(n * n * 4);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, x.get(), n * n, 2, 0.0f, 1.0f);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, w.get(), n * n, 3, 0.0f, 1.0f);
  cuda::Blas blas;
  const float mm_ms = time_ms([&] { blas.linear(nullptr, cuda::Precision::bf16, x.get(), n, w.get(), n, n, nullptr, y.as<float>()); }, 10);
  c.bf16_flops_per_s = 2.0 * n * n * n / (mm_ms * 1e-3);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return c;
}

}  // namespace moeserve
