// Expert projections over grouped rows, the plain version: one thread per output (one gate/up pair when SwiGLU
// is fused), a dot product over the input with MXFP4 weights dequantised on the fly, in fp32. Serves the fp32
// precision and is the simplest statement of what moe_decode.cu and moe_prefill.cu compute.
// CPU reference: cpu::expert_linear (then cpu::swiglu for the first projection).
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

__global__ void mxfp4_pack_kernel(uint32_t* words, int64_t n) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    words[i] = mxfp4_pack_word(words[i]);
}

template <typename Act, bool kSwiglu>
__global__ void moe_reference_kernel(MoeGemmParams p) {
  pdl_prologue();
  const int row = blockIdx.x;
  const int64_t N = p.w.out_features, K = p.w.in_features, blocks_per_row = K / 32;
  const int64_t outputs = kSwiglu ? N / 2 : N;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  // The grid covers every pair; with expert parallelism only the rank's own are grouped, rows [0, offsets[E]).
  if (j >= outputs || row >= p.routing.expert_offsets[p.routing.num_experts]) return;
  const int e = p.routing.row_expert[row];
  const Act* x = static_cast<const Act*>(p.x) + static_cast<int64_t>(p.x_row != nullptr ? p.x_row[row] : row) * K;
  auto output = [&](int64_t n) {
    const uint8_t* blocks = p.w.blocks + (static_cast<int64_t>(e) * N + n) * blocks_per_row * 16;
    const uint8_t* scales = p.w.scales + (static_cast<int64_t>(e) * N + n) * blocks_per_row;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < blocks_per_row; ++kb) {
      const float factor = mxfp4_factor(scales[kb]);
      for (int q = 0; q < 4; ++q) {
        // The device's packed word (moe_layout.h) back in the checkpoint's order: bytes i = 4q .. 4q + 3.
        const uint32_t word = mxfp4_unpack_word(reinterpret_cast<const uint32_t*>(blocks + kb * 16)[q]);
        for (int b = 0; b < 4; ++b) {
          const int i = 4 * q + b;
          const float2 w = mxfp4_pair((word >> (8 * b)) & 0xffu, factor);
          acc += w.x * to_float(x[kb * 32 + 2 * i]);
          acc += w.y * to_float(x[kb * 32 + 2 * i + 1]);
        }
      }
    }
    return acc + p.w.bias[static_cast<int64_t>(e) * N + n];
  };
  if constexpr (kSwiglu) {
    static_cast<Act*>(p.out)[row * outputs + j] =
        from_float<Act>(swiglu(output(2 * j), output(2 * j + 1), p.swiglu_alpha, p.swiglu_limit));
  } else {
    static_cast<float*>(p.out)[row * outputs + j] = output(j);
  }
}

template <typename Act>
void launch_typed(cudaStream_t stream, const MoeGemmParams& p) {
  const int64_t outputs = p.swiglu ? p.w.out_features / 2 : p.w.out_features;
  const dim3 grid(p.rows, ceil_div(outputs, 128));
  if (p.swiglu)
    MOESERVE_CUDA_CHECK(cuda_launch(moe_reference_kernel<Act, true>, grid, 128, 0, stream, p));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(moe_reference_kernel<Act, false>, grid, 128, 0, stream, p));
}

}  // namespace

void launch_moe_reference(cudaStream_t stream, Precision type, const MoeGemmParams& params) {
  check_moe_gemm_shape("moe_reference", params.rows, params.w.out_features, params.w.in_features,
                       params.routing.num_experts);
  if (params.rows == 0) return;
  if (type == Precision::bf16)
    launch_typed<bf16>(stream, params);
  else
    launch_typed<float>(stream, params);
}

void launch_mxfp4_pack(cudaStream_t stream, uint8_t* blocks, int64_t bytes) {
  MOESERVE_CHECK(bytes >= 0 && bytes % 16 == 0, "MXFP4 packing: {} bytes (whole 16-byte blocks)", bytes);
  if (bytes == 0) return;
  const int64_t words = bytes / 4;
  MOESERVE_CUDA_CHECK(cuda_launch(mxfp4_pack_kernel, static_cast<int>(std::min<int64_t>((words + 255) / 256, 65535)),
                                  256, 0, stream, reinterpret_cast<uint32_t*>(blocks), words));
}

}  // namespace moeserve::cuda
