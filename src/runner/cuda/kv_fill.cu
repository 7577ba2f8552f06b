// Random KV contents for benchmarks (decode at a long context timed without a prefill first): uniform values of
// unit variance, never zeros. fp8: bf16 values made by launch_fill_uniform in a scratch buffer, a piece at a
// time (the pool is most of the device's memory), and quantised as RoPE's KV write would store them (scale 1).
#include <algorithm>

#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

__global__ void quantize_e4m3_kernel(const bf16* values, int64_t n, fp8* out) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_kv(out + i, __bfloat162float(values[i]), 1.0f);
}

}  // namespace

void fill_kv_random(cudaStream_t stream, KvDtype dtype, void* base, size_t bytes, uint64_t seed) {
  if (dtype != KvDtype::fp8_e4m3) {
    const Precision type = dtype == KvDtype::f32 ? Precision::f32 : Precision::bf16;
    launch_fill_uniform(stream, type, base, static_cast<int64_t>(bytes / element_bytes(type)), seed, 0.0f, 1.0f);
    return;
  }
  const size_t piece = std::min<size_t>(bytes, size_t{64} << 20);  // values per piece
  DeviceBuffer scratch(std::max<size_t>(piece, 1) * sizeof(bf16));
  uint8_t* out = static_cast<uint8_t*>(base);
  for (size_t done = 0, index = 0; done < bytes; done += piece, ++index) {
    const int64_t n = static_cast<int64_t>(std::min(piece, bytes - done));
    launch_fill_uniform(stream, Precision::bf16, scratch.get(), n, seed + index, 0.0f, 1.0f);
    MOESERVE_CUDA_CHECK(cuda_launch(quantize_e4m3_kernel, 1024, 256, 0, stream, scratch.as<bf16>(), n,
                                    reinterpret_cast<fp8*>(out + done)));
  }
  // The scratch buffer is freed on return: wait for the kernels that read it.
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace moeserve::cuda
