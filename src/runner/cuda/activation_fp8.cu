// Dynamic per-row FP8 quantisation of activations (--activation-dtype fp8): the input rows of the expert
// projections as e4m3 with one fp32 scale a row, for the decode_mma kernels' m16n8k32 e4m3 tensor cores
// (moe_decode_mma.cu). vLLM's dynamic per-token scheme: scale = amax / 448, q = e4m3(x * (448 / amax)), round to
// nearest even, saturating (448 is e4m3's largest finite value, so only rounding can reach it).
// One block of 128 threads per row; a row is read twice (amax, then the conversion), from L1/L2 the second time.
// CPU reference: the same arithmetic with cuda_fp8.h's host conversion (tests/runner/cuda/moe_test.cc).
#include <cuda_fp8.h>

#include "runner/cuda/cuda_check.h"
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/kernels.h"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void quantize_rows_e4m3_kernel(const bf16* x, int64_t cols, uint8_t* q, float* scale) {
  pdl_prologue();
  const int64_t r = blockIdx.x;
  const uint4* row = reinterpret_cast<const uint4*>(x + r * cols);
  const int64_t vectors = cols / 8;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    const uint4 v = row[i];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (uint32_t word : words) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  __shared__ float warp_amax[kThreads / 32];
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = warp_amax[0];
  for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  // IEEE divisions (not the reciprocal approximations) so that the host reference computes the same factors.
  const float inverse = amax > 0.0f ? __fdiv_rn(kE4m3Max, amax) : 1.0f;
  if (threadIdx.x == 0) scale[r] = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  uint2* out = reinterpret_cast<uint2*>(q + r * cols);
  for (int64_t i = threadIdx.x; i < vectors; i += kThreads) {
    const uint4 v = row[i];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
      packed[j] = __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(f.x, inverse), __fmul_rn(f.y, inverse)),
                                             __NV_SATFINITE, __NV_E4M3);
    }
    out[i] = make_uint2(packed[0] | packed[1] << 16, packed[2] | packed[3] << 16);
  }
}

}  // namespace

void launch_quantize_rows_e4m3(cudaStream_t stream, const void* x, int rows, int64_t cols, uint8_t* q, float* scale) {
  if (cols <= 0 || cols % 8 != 0)
    fail_cuda("quantize_rows_e4m3", "cols must be a positive multiple of 8", __FILE__, __LINE__);
  if (rows <= 0) return;
  MOESERVE_CUDA_CHECK(
      cuda_launch(quantize_rows_e4m3_kernel, rows, kThreads, 0, stream, static_cast<const bf16*>(x), cols, q, scale));
}

}  // namespace moeserve::cuda
