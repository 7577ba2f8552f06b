// Random FP8 weights for synthetic DeepSeek models (deepseek_kernels.h): launch_fill_bytes' bytes (synthetic.cu, a
// pure function of key and index) with bit 6, the exponent's top bit, cleared. e4m3's NaN codes (S.1111.111) need
// that bit, so none is left; the largest magnitude is 1.875 (exponent 0111, mantissa 111).
#include <algorithm>

#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

__global__ void clear_exponent_top_bit_kernel(uint8_t* bytes, int64_t n) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bytes[i] &= 0xbfu;
}

}  // namespace

void launch_fill_e4m3(cudaStream_t stream, uint8_t* out, int64_t n, uint64_t key) {
  if (n == 0) return;
  launch_fill_bytes(stream, out, n, key);
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
  MOESERVE_CUDA_CHECK(cuda_launch(clear_exponent_top_bit_kernel, blocks, kThreads, 0, stream, out, n));
}

}  // namespace moeserve::cuda
