#include "ceilings.h"

#include "runner/cuda/blas.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda_bench {

Ceilings measure_ceilings() {
  Ceilings c;
  const size_t bytes = size_t{4} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::launch_fill_bytes(nullptr, a.as<uint8_t>(), bytes, 1);
  const double copy_us = event_time_us(
      [&] { MOESERVE_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); }, 10);
  c.copy_bytes_per_s = 2.0 * bytes / (copy_us * 1e-6);
  const int64_t n = 8192;
  cuda::DeviceBuffer x(n * n * 2), w(n * n * 2), y(n * n * 4);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, x.get(), n * n, 2, 0.0f, 1.0f);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, w.get(), n * n, 3, 0.0f, 1.0f);
  cuda::Blas blas;
  const double mm_us = event_time_us(
      [&] { blas.linear(nullptr, cuda::Precision::bf16, x.get(), n, w.get(), n, n, nullptr, y.as<float>()); }, 10);
  c.bf16_flops_per_s = 2.0 * n * n * n / (mm_us * 1e-6);
  return c;
}

}  // namespace moeserve::cuda_bench
