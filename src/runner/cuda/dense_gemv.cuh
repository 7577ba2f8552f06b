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

}  // namespace moeserve::cuda
