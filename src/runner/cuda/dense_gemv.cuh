// The dense GEMV's pieces (dense_gemv.cu), shared with the kernels that fuse it with their epilogue (rope.cu:
// the QKV projection with RoPE and the KV write), so that a fused kernel's sums are the same bits as the GEMV's.
#pragma once

#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {

inline constexpr int kDenseGemvWarps = 8;
inline constexpr int kDenseGemvMaxK = 4096;

// Rows 0 .. kRows - 1 of x [kRows, K] into x_s, by the whole block; the caller syncs.
template <int kRows>
__device__ __forceinline__ void dense_gemv_load_x(const bf16* x, int K, bf16 (*x_s)[kDenseGemvMaxK]) {
  for (int i = threadIdx.x; i < kRows * K / 8; i += blockDim.x) {
    const int r = i / (K / 8), piece = i % (K / 8);
    *reinterpret_cast<uint4*>(&x_s[r][piece * 8]) = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * K)[piece];
  }
}

// One warp's dot products of weight row w (K bf16 values) with the kRows rows of x_s: lanes read consecutive
// 16-byte pieces (a 512-byte coalesced line per step, several in flight), and the warp's sums are reduced across it,
// so every lane returns the totals in acc.
template <int kRows>
__device__ __forceinline__ void dense_gemv_row(const bf16 (*x_s)[kDenseGemvMaxK], const bf16* weight_row, int K,
                                               int lane, float (&acc)[kRows]) {
  const uint4* w = reinterpret_cast<const uint4*>(weight_row);
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  const int pieces = K / 8;
#pragma unroll 4
  for (int piece = lane; piece < pieces; piece += 32) {
    const uint4 wv = load_weights_16(w + piece);
    const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4 xv = *reinterpret_cast<const uint4*>(&x_s[r][piece * 8]);
      const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[r] += __uint_as_float(words[i] << 16) * __uint_as_float(xs[i] << 16);
        acc[r] += __uint_as_float(words[i] & 0xffff0000u) * __uint_as_float(xs[i] & 0xffff0000u);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
}

// A fused GEMV's blocks (kDenseGemvWarps warps each, x rows loaded into x_s and synced): warp w of block b computes
// output n = 8 b + w (when n < N) for the kRows rows, y[r, n] = sum + bias[n]; then the block counts itself done on
// `counter` (one int32, zero before the launch). Returns true in the last block to finish, whose threads then see
// every block's y through L2 (read it with ld.cg: this SM's L1 may hold nothing of it, and must not be trusted to),
// and which leaves the counter zero for the next launch; false in the others, which are done.
template <int kRows>
__device__ __forceinline__ bool dense_gemv_then_last_block(const bf16 (*x_s)[kDenseGemvMaxK], const bf16* W, int K,
                                                           int N, const float* bias, float* y, int32_t* counter) {
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = blockIdx.x * kDenseGemvWarps + warp;
  if (n < N) {
    float acc[kRows];
    dense_gemv_row<kRows>(x_s, W + static_cast<int64_t>(n) * K, K, lane, acc);
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kRows; ++r) y[static_cast<int64_t>(r) * N + n] = acc[r] + (bias != nullptr ? bias[n] : 0.0f);
  }
  __syncthreads();  // the block's outputs are written
  if (threadIdx.x == 0) {
    __threadfence();  // ... and visible to the device before the count says so
    last = atomicAdd(counter, 1) == static_cast<int>(gridDim.x) - 1;
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0;
  return true;
}

}  // namespace moeserve::cuda
