// The dense MLP's activation (deepseek_kernels.h): silu(gate) * up of two fp32 projections, written in the type
// of the down projection's input. Elementwise, a grid-stride loop.
// CPU reference: cpu::silu_mul (g / (1 + exp(-g)) * u).
#include <algorithm>

#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

template <typename Out>
__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, Out* out) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = from_float<Out>(g / (1.0f + expf(-g)) * up[i]);
  }
}

}  // namespace

void launch_silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, Precision out_type,
                     void* out) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
  if (out_type == Precision::bf16)
    MOESERVE_CUDA_CHECK(
        cuda_launch(silu_mul_kernel<bf16>, blocks, kThreads, 0, stream, gate, up, n, static_cast<bf16*>(out)));
  else
    MOESERVE_CUDA_CHECK(
        cuda_launch(silu_mul_kernel<float>, blocks, kThreads, 0, stream, gate, up, n, static_cast<float*>(out)));
}

}  // namespace moeserve::cuda
