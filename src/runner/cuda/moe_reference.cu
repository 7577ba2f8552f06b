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

// One thread per block of the checkpoint's order: its 16 bytes and scale byte to their tiled places.
__global__ void mxfp4_tile_kernel(uint4* blocks_out, uint8_t* scales_out, const uint4* blocks_in,
                                  const uint8_t* scales_in, int64_t experts, int64_t rows, int blocks_per_row) {
  pdl_prologue();
  const int64_t per_expert = rows * blocks_per_row, n = experts * per_expert;
  const int64_t expert_elements = rows * mxfp4_padded_blocks(blocks_per_row);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i / per_expert, row = (i % per_expert) / blocks_per_row;
    const int b = static_cast<int>(i % blocks_per_row);
    const int64_t out = e * expert_elements + mxfp4_tiled_index(row, b, rows, blocks_per_row);
    blocks_out[out] = blocks_in[i];
    scales_out[out] = scales_in[i];
  }
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
    const int64_t expert_first = static_cast<int64_t>(e) * N * mxfp4_padded_blocks(static_cast<int>(blocks_per_row));
    float acc = 0.0f;
    for (int64_t kb = 0; kb < blocks_per_row; ++kb) {
      const int64_t index = expert_first + mxfp4_tiled_index(n, static_cast<int>(kb), N, static_cast<int>(blocks_per_row));
      const float factor = mxfp4_factor(p.w.scales[index]);
      for (int q = 0; q < 4; ++q) {
        // The device's packed word (moe_layout.h) back in the checkpoint's order: bytes i = 4q .. 4q + 3.
        const uint32_t word = mxfp4_unpack_word(reinterpret_cast<const uint32_t*>(p.w.blocks + index * 16)[q]);
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

int64_t mxfp4_tiled_elements(int64_t experts, int64_t rows, int blocks_per_row) {
  MOESERVE_CHECK(experts >= 0 && rows >= 0 && blocks_per_row > 0, "MXFP4 experts {} x {} rows x {} blocks", experts,
                 rows, blocks_per_row);
  return experts * rows * mxfp4_padded_blocks(blocks_per_row);
}

void launch_mxfp4_tile(cudaStream_t stream, uint8_t* blocks_out, uint8_t* scales_out, const uint8_t* blocks_in,
                       const uint8_t* scales_in, int64_t experts, int64_t rows, int blocks_per_row) {
  const int64_t elements = mxfp4_tiled_elements(experts, rows, blocks_per_row);
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(blocks_out, 0, elements * 16, stream));
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(scales_out, 0, elements, stream));
  const int64_t n = experts * rows * blocks_per_row;
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(mxfp4_tile_kernel, static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535)), 256, 0,
                                  stream, reinterpret_cast<uint4*>(blocks_out), scales_out,
                                  reinterpret_cast<const uint4*>(blocks_in), scales_in, experts, rows, blocks_per_row));
}

}  // namespace moeserve::cuda
