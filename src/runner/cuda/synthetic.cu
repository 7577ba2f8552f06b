// Random tensors made on the device, for synthetic full-size models (no 60 GB files) and benchmarks: every
// element is a pure function of (key, index), so a synthetic model is the same on every run. Also the
// MXFP4 scale check run on uploaded weights.
#include <algorithm>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"

namespace moeserve::cuda {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* out, int64_t n, uint64_t key, float mean, float std) {
  pdl_prologue();
  // Uniform on [-sqrt(3), sqrt(3)): unit variance.
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix64(key ^ mix64(i)) >> 40) * (1.0f / 16777216.0f);
    out[i] = from_float<T>(mean + std * (u - 0.5f) * 3.4641016f);
  }
}

__global__ void fill_bytes_kernel(uint8_t* out, int64_t n, uint64_t key) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<uint8_t>(mix64(key ^ mix64(i / 8)) >> (8 * (i % 8)));
}

__global__ void fill_scales_kernel(uint8_t* out, int64_t n, uint64_t key, int exponent) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<uint8_t>(127 + exponent - static_cast<int>(mix64(key ^ mix64(i)) & 1));
}

__global__ void max_byte_kernel(const uint8_t* bytes, int64_t n, int32_t* result) {
  pdl_prologue();
  int best = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    best = max(best, static_cast<int>(bytes[i]));
  for (int offset = 16; offset > 0; offset >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, offset));
  if (threadIdx.x % 32 == 0) atomicMax(result, best);
}

__global__ void row_scale_max_kernel(const uint8_t* scales, int64_t experts, int64_t rows, int blocks_per_row,
                                     uint8_t* row_max, int32_t* wide_rows) {
  pdl_prologue();
  const int64_t expert_elements = rows * mxfp4_padded_blocks(blocks_per_row);
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < experts * rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Mxfp4TiledRow tiled = mxfp4_tiled_row(r % rows, rows, blocks_per_row);
    const uint8_t* row = scales + (r / rows) * expert_elements + tiled.row_offset;
    int largest = 0, smallest = 255;
    for (int b = 0; b < blocks_per_row; ++b) {
      const int scale = row[(b / kMxfp4ChunkBlocks) * tiled.chunk_stride + b % kMxfp4ChunkBlocks];
      largest = max(largest, scale), smallest = min(smallest, scale);
    }
    row_max[r] = static_cast<uint8_t>(largest);
    if (largest - smallest > kMxfp4E4m3ExactSpan) atomicAdd(wide_rows, 1);
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

void launch_fill_uniform(cudaStream_t stream, Precision type, void* out, int64_t n, uint64_t key, float mean,
                         float std) {
  if (n == 0) return;
  if (type == Precision::bf16)
    MOESERVE_CUDA_CHECK(cuda_launch(fill_uniform_kernel<bf16>, grid_for(n), 256, 0, stream, static_cast<bf16*>(out), n,
                                    key, mean, std));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(fill_uniform_kernel<float>, grid_for(n), 256, 0, stream, static_cast<float*>(out),
                                    n, key, mean, std));
}

void launch_fill_bytes(cudaStream_t stream, uint8_t* out, int64_t n, uint64_t key) {
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(fill_bytes_kernel, grid_for(n), 256, 0, stream, out, n, key));
}

void launch_fill_scales(cudaStream_t stream, uint8_t* out, int64_t n, uint64_t key, int exponent) {
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(fill_scales_kernel, grid_for(n), 256, 0, stream, out, n, key, exponent));
}

void launch_max_byte(cudaStream_t stream, const uint8_t* bytes, int64_t n, int32_t* result) {
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(int32_t), stream));
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(max_byte_kernel, grid_for(n), 256, 0, stream, bytes, n, result));
}

void launch_mxfp4_row_scale_max(cudaStream_t stream, const uint8_t* scales, int64_t experts, int64_t rows,
                                int blocks_per_row, uint8_t* row_max, int32_t* wide_rows) {
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(wide_rows, 0, sizeof(int32_t), stream));
  if (experts * rows == 0) return;
  if (blocks_per_row <= 0) fail_cuda("mxfp4_row_scale_max", "blocks_per_row must be positive", __FILE__, __LINE__);
  MOESERVE_CUDA_CHECK(cuda_launch(row_scale_max_kernel, grid_for(experts * rows), 256, 0, stream, scales, experts, rows,
                                  blocks_per_row, row_max, wide_rows));
}

}  // namespace moeserve::cuda
