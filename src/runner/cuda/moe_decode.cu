// Expert projections for small batches (decode), where reading the MXFP4 weights is the whole cost: a
// tensor-core GEMV. The weights are the A operand of mma.sync m16n8k16 and are dequantised straight into
// registers, never through shared memory; the expert's tokens (up to 8 per n-tile) are the B operand.
// A block owns 16 weight rows (for the first projection: 8 gate/up pairs, rows 2j and 2j+1 as fragment rows g
// and g+8, so SwiGLU is applied in the epilogue by the thread that holds both). Lane (g, c) loads one whole
// 16-byte MXFP4 block of rows g and g+8 per 128-column chunk: block c of the chunk. The reduction order inside
// the chunk is permuted so that its k indices are that block's values (k step s, pair i -> value 4s + i, and
// +2 for the upper half), and the token values are loaded with the same permutation, so the sum is unchanged.
// Version 1: a block's 4 warps owned 64 rows, each walking all of K with one chunk of loads in flight; at batch 1
// that is ~11 warps per SM with 1 KB in flight each, so (by Little's law) latency-bound near 1.5 TB/s.
// Version 2: a block's 4 warps share 16 rows and split K (chunk c to warp c % 4), partial sums meet in shared
// memory in a fixed order: 4x the warps and a quarter of the chain each.
// Version 3 (one n-tile): two chunks per step with the next two loading, twice the bytes in flight per warp.
// Version 4: the blocks converted a 32-bit word at a time (moe_layout.h: prmt look-ups and a bf16 multiply,
// about 2 instructions a value against 5), as the wgmma kernels do.
// CPU reference: cpu::expert_linear (+ cpu::swiglu).
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"

namespace moeserve::cuda {
namespace {

constexpr int kWarps = 4;

template <int kTiles>
struct Chunk {
  uint4 w_a, w_b;      // MXFP4 block of rows g and g + 8
  uint32_t s_a, s_b;   // their scales
  uint4 x[kTiles][4];  // 32 bf16 token values per n-tile
};

template <bool kSwiglu, int kTiles>
__global__ void __launch_bounds__(kWarps * 32) moe_decode_kernel(MoeGemmParams p) {
  pdl_prologue();
  MoeTile t;
  if (!moe_tile(p.routing, blockIdx.y, t)) return;
  const int e = t.expert, row0 = t.row0, row_end = t.row_end;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t N = p.w.out_features, K = p.w.in_features;
  const int blocks_per_row = static_cast<int>(K / 32);

  const int64_t row_a = moe_slab_row(blockIdx.x, g, 0, kSwiglu), row_b = moe_slab_row(blockIdx.x, g, 1, kSwiglu);
  const bool ok_a = row_a < N, ok_b = row_b < N;
  // Tiled weights (moe_layout.h): a chunk's 4 blocks of a row are adjacent, so a warp's loads of one chunk cover
  // its 16 rows' 64-byte runs of one 16 KB chunk.
  const int64_t expert_row = static_cast<int64_t>(e) * N;
  const int64_t expert_first = expert_row * mxfp4_padded_blocks(blocks_per_row);
  const Mxfp4TiledRow tiled_a = mxfp4_tiled_row(ok_a ? row_a : 0, N, blocks_per_row);
  const Mxfp4TiledRow tiled_b = mxfp4_tiled_row(ok_b ? row_b : 0, N, blocks_per_row);
  const int64_t first_a = expert_first + tiled_a.row_offset + c, first_b = expert_first + tiled_b.row_offset + c;

  const bf16* x_rows[kTiles];
  bool x_ok[kTiles];
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
    const int r = row0 + nt * 8 + g;
    x_ok[nt] = r < row_end;
    const int x_row = x_ok[nt] ? (p.x_row != nullptr ? p.x_row[r] : r) : 0;
    x_rows[nt] = static_cast<const bf16*>(p.x) + static_cast<int64_t>(x_row) * K;
  }

  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto load = [&](int chunk, Chunk<kTiles>& ch) {
    const int kb = chunk * 4 + c;
    const bool k_ok = kb < blocks_per_row;
    const int64_t index_a = first_a + chunk * tiled_a.chunk_stride, index_b = first_b + chunk * tiled_b.chunk_stride;
    ch.w_a = ok_a && k_ok ? load_weights_16(p.w.blocks + index_a * 16) : zero;
    ch.w_b = ok_b && k_ok ? load_weights_16(p.w.blocks + index_b * 16) : zero;
    ch.s_a = ok_a && k_ok ? p.w.scales[index_a] : 0u;
    ch.s_b = ok_b && k_ok ? p.w.scales[index_b] : 0u;
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        ch.x[nt][i] = x_ok[nt] && k_ok ? *reinterpret_cast<const uint4*>(x_rows[nt] + kb * 32 + i * 8) : zero;
  };

  float acc[kTiles][4] = {};
  const Mxfp4Bf16Constants constants = mxfp4_bf16_constants();  // in registers (moe_layout.h)
  // k step s takes bytes 2s, 2s + 1 of both rows' blocks: word s / 2 of each, converted four bf16x2 at a time.
  auto compute = [&](const Chunk<kTiles>& ch) {
    const uint32_t f_a = mxfp4_scale_bf16x2(ch.s_a), f_b = mxfp4_scale_bf16x2(ch.s_b);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t v_a[4], v_b[4];
      mxfp4_word_to_bf16(word_of(ch.w_a, q), f_a, constants, v_a);
      mxfp4_word_to_bf16(word_of(ch.w_b, q), f_b, constants, v_b);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * q + h;
        const uint32_t a[4] = {v_a[2 * h], v_b[2 * h], v_a[2 * h + 1], v_b[2 * h + 1]};
#pragma unroll
        for (int nt = 0; nt < kTiles; ++nt)
          mma_bf16_16816(acc[nt], a, word_of(ch.x[nt][s / 2], 2 * (s % 2)), word_of(ch.x[nt][s / 2], 2 * (s % 2) + 1));
      }
    }
  };
  const int chunks = (blocks_per_row + 3) / 4;
  if constexpr (kTiles == 1) {
    // Two of this warp's chunks per step while the next two load: four in registers, ~2 KB per warp in flight.
    Chunk<kTiles> a0{}, a1{};
    if (warp < chunks) load(warp, a0);
    if (warp + kWarps < chunks) load(warp + kWarps, a1);
    for (int chunk = warp; chunk < chunks; chunk += 2 * kWarps) {
      Chunk<kTiles> n0 = a0, n1 = a1;
      if (chunk + 2 * kWarps < chunks) load(chunk + 2 * kWarps, n0);
      if (chunk + 3 * kWarps < chunks) load(chunk + 3 * kWarps, n1);
      compute(a0);
      if (chunk + kWarps < chunks) compute(a1);
      a0 = n0;
      a1 = n1;
    }
  } else {
    Chunk<kTiles> current{};
    if (warp < chunks) load(warp, current);
    for (int chunk = warp; chunk < chunks; chunk += kWarps) {
      Chunk<kTiles> next = current;
      if (chunk + kWarps < chunks) load(chunk + kWarps, next);
      compute(current);
      current = next;
    }
  }

  // The warps' partial sums, added in warp order by warp 0.
  __shared__ float partial[kWarps][kTiles][4][32];
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][nt][i][lane] = acc[nt][i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[nt][i] = partial[0][nt][i][lane];
      for (int w = 1; w < kWarps; ++w) acc[nt][i] += partial[w][nt][i][lane];
    }

  // acc[nt] = (row a, token 2c), (row a, token 2c + 1), (row b, token 2c), (row b, token 2c + 1).
  const float* bias = p.w.bias + expert_row;
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int r = row0 + nt * 8 + 2 * c + t;
      if (r >= row_end) continue;
      if constexpr (kSwiglu) {
        if (ok_b)
          static_cast<bf16*>(p.out)[static_cast<int64_t>(r) * (N / 2) + row_a / 2] = __float2bfloat16_rn(
              swiglu(acc[nt][t] + bias[row_a], acc[nt][2 + t] + bias[row_b], p.swiglu_alpha, p.swiglu_limit));
      } else {
        float* y = static_cast<float*>(p.out) + static_cast<int64_t>(r) * N;
        if (ok_a) y[row_a] = acc[nt][t] + bias[row_a];
        if (ok_b) y[row_b] = acc[nt][2 + t] + bias[row_b];
      }
    }
  }
}

template <int kTiles>
void launch_tiles(cudaStream_t stream, const MoeGemmParams& p) {
  const int64_t N = p.w.out_features;
  const int blocks_x = p.swiglu ? ceil_div(N / 2, 8) : ceil_div(N, 16);
  const dim3 grid(blocks_x, moe_max_tiles(p.rows, 8 * kTiles, p.routing.num_experts));
  if (p.swiglu)
    MOESERVE_CUDA_CHECK(cuda_launch(moe_decode_kernel<true, kTiles>, grid, kWarps * 32, 0, stream, p));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(moe_decode_kernel<false, kTiles>, grid, kWarps * 32, 0, stream, p));
}

}  // namespace

void launch_moe_decode(cudaStream_t stream, const MoeGemmParams& params, int n_tiles) {
  check_moe_gemm_shape("moe_decode", params.rows, params.w.out_features, params.w.in_features,
                       params.routing.num_experts);
  if (params.rows == 0) return;
  if (n_tiles == 1)
    launch_tiles<1>(stream, params);
  else if (n_tiles == 2)
    launch_tiles<2>(stream, params);
  else
    fail_cuda("moe_decode", "n_tiles must be 1 or 2", __FILE__, __LINE__);
}

}  // namespace moeserve::cuda
