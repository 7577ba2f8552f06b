// Expert projections for large batches (prefill): a grouped GEMM over tiles of 128 grouped rows (one expert
// each, from the device-built tile list) by 128 weight rows, on tensor cores (mma.sync m16n8k16 bf16, fp32
// accumulators). Per 64-column k step: the activation rows are gathered into shared memory by cp.async (the
// first projection reads each row's token from row_token), the MXFP4 weights are loaded as 16-byte blocks,
// dequantised to bf16 (exactly) and stored to shared memory; 8 warps, each 32 rows x 64 columns, read their
// fragments with ldmatrix. Two shared-memory stages: the next step's copies and weight loads are in flight
// while the current one is multiplied. The epilogue adds the bias and, for the first projection, applies
// SwiGLU to each (gate, up) column pair, which lands in one thread's accumulators.
// Version 1: mma.sync (no wgmma/TMA yet). Version 2: blocks converted a 32-bit word at a time (moe_layout.h).
// moe_prefill_wgmma.cu is the wgmma version.
// CPU reference: cpu::expert_linear (+ cpu::swiglu).
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_wgmma.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kTileM = kMoePrefillTileRows;  // grouped rows
constexpr int kTileN = 128;                  // weight rows
constexpr int kTileK = 64;                   // two MXFP4 blocks
constexpr int kRowStride = kTileK + 8;       // bf16; 144-byte rows keep ldmatrix conflict-free
constexpr int kThreads = 256;
constexpr int kStageElements = (kTileM + kTileN) * kRowStride;
constexpr int kSharedBytes = 2 * kStageElements * static_cast<int>(sizeof(bf16));

template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads) moe_prefill_kernel(MoeGemmParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char shared[];
  MoeTile t;
  if (!moe_tile(p.routing, blockIdx.x, t)) return;
  const int e = t.expert, row0 = t.row0, row_end = t.row_end;
  const int64_t N = p.w.out_features, K = p.w.in_features;
  const int blocks_per_row = static_cast<int>(K / 32);
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = warp % 4, warp_n = warp / 4;

  auto a_tile = [&](int stage) { return reinterpret_cast<bf16(*)[kRowStride]>(shared) + stage * (kTileM + kTileN); };
  auto b_tile = [&](int stage) { return a_tile(stage) + kTileM; };

  // Activation copies: 4 chunks of 16 bytes per thread per k step.
  const bf16* x = static_cast<const bf16*>(p.x);
  const bf16* a_source[4];
  bool a_ok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int id = tid + kThreads * i, r = id / 8;
    const int row = row0 + r;
    a_ok[i] = row < row_end;
    const int x_row = a_ok[i] ? (p.x_row != nullptr ? p.x_row[row] : row) : 0;
    a_source[i] = x + static_cast<int64_t>(x_row) * K + (id % 8) * 8;
  }
  auto copy_a = [&](int stage, int step) {
    bf16(*a)[kRowStride] = a_tile(stage);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int id = tid + kThreads * i;
      const bool ok = a_ok[i] && step * kTileK + (id % 8) * 8 < K;
      cp_async_16(&a[id / 8][(id % 8) * 8], ok ? a_source[i] + step * kTileK : x, ok);
    }
  };

  // Weights: one MXFP4 block (row n0 + tid / 2, block 2 step + tid % 2) per thread per k step.
  const int b_row = tid / 2, b_half = tid % 2;
  const bool b_row_ok = n0 + b_row < N;
  // Tiled weights (moe_layout.h): block kb of the row at row_offset + (kb / 4) chunk strides + kb % 4.
  const Mxfp4TiledRow b_tiled = mxfp4_tiled_row(b_row_ok ? n0 + b_row : 0, N, blocks_per_row);
  const int64_t b_first = static_cast<int64_t>(e) * N * mxfp4_padded_blocks(blocks_per_row) + b_tiled.row_offset;
  auto load_b = [&](int step, uint4& block, uint32_t& scale) {
    const int kb = 2 * step + b_half;
    const bool ok = b_row_ok && kb < blocks_per_row;
    const int64_t index = b_first + (kb / 4) * b_tiled.chunk_stride + kb % 4;
    block = ok ? load_weights_16(p.w.blocks + index * 16) : make_uint4(0, 0, 0, 0);
    scale = ok ? p.w.scales[index] : 0u;
  };
  const Mxfp4Bf16Constants constants = mxfp4_bf16_constants();  // in registers (moe_layout.h)
  auto store_b = [&](int stage, const uint4& block, uint32_t scale) {
    const uint32_t factor = mxfp4_scale_bf16x2(scale);
    uint4* dst = reinterpret_cast<uint4*>(&b_tile(stage)[b_row][b_half * 32]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t w[4];
      mxfp4_word_to_bf16(word_of(block, i), factor, constants, w);
      dst[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  };

  float acc[2][8][4] = {};
  const int steps = static_cast<int>((K + kTileK - 1) / kTileK);
  {
    copy_a(0, 0);
    cp_async_commit();
    uint4 block;
    uint32_t scale;
    load_b(0, block, scale);
    store_b(0, block, scale);
    cp_async_wait_all();
    __syncthreads();
  }
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const bool more = step + 1 < steps;
    uint4 next_block = make_uint4(0, 0, 0, 0);
    uint32_t next_scale = 0;
    if (more) {
      copy_a(stage ^ 1, step + 1);
      cp_async_commit();
      load_b(step + 1, next_block, next_scale);
    }
    bf16(*a)[kRowStride] = a_tile(stage);
    bf16(*b)[kRowStride] = b_tile(stage);
#pragma unroll
    for (int k16 = 0; k16 < kTileK / 16; ++k16) {
      uint32_t a_frag[2][4];
#pragma unroll
      for (int mf = 0; mf < 2; ++mf)
        ldmatrix_x4(a_frag[mf], &a[warp_m * 32 + mf * 16 + lane % 16][k16 * 16 + (lane / 16) * 8]);
#pragma unroll
      for (int nf2 = 0; nf2 < 4; ++nf2) {
        uint32_t b_frag[4];
        ldmatrix_x4(b_frag, &b[warp_n * 64 + nf2 * 16 + lane % 8 + (lane / 16) * 8][k16 * 16 + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mf = 0; mf < 2; ++mf) {
          mma_bf16_16816(acc[mf][2 * nf2], a_frag[mf], b_frag[0], b_frag[1]);
          mma_bf16_16816(acc[mf][2 * nf2 + 1], a_frag[mf], b_frag[2], b_frag[3]);
        }
      }
    }
    if (more) store_b(stage ^ 1, next_block, next_scale);
    cp_async_wait_all();
    __syncthreads();
  }

  // acc[mf][nf] = (row g, columns 2c, 2c + 1), (row g + 8, same columns).
  const int g = lane / 4, c = lane % 4;
  const float* bias = p.w.bias + static_cast<int64_t>(e) * N;
#pragma unroll
  for (int mf = 0; mf < 2; ++mf) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + warp_m * 32 + mf * 16 + g + 8 * half;
      if (row >= row_end) continue;
#pragma unroll
      for (int nf = 0; nf < 8; ++nf) {
        const int64_t col = n0 + warp_n * 64 + nf * 8 + 2 * c;
        if (col >= N) continue;
        const float v0 = acc[mf][nf][2 * half] + bias[col], v1 = acc[mf][nf][2 * half + 1] + bias[col + 1];
        if constexpr (kSwiglu) {
          static_cast<bf16*>(p.out)[static_cast<int64_t>(row) * (N / 2) + col / 2] =
              __float2bfloat16_rn(swiglu(v0, v1, p.swiglu_alpha, p.swiglu_limit));
        } else {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + static_cast<int64_t>(row) * N + col) =
              make_float2(v0, v1);
        }
      }
    }
  }
}

template <bool kSwiglu>
void launch_typed(cudaStream_t stream, const MoeGemmParams& p) {
  allow_dynamic_shared_memory<moe_prefill_kernel<kSwiglu>>(kSharedBytes);
  const dim3 grid(moe_max_tiles(p.rows, kTileM, p.routing.num_experts), ceil_div(p.w.out_features, kTileN));
  MOESERVE_CUDA_CHECK(cuda_launch(moe_prefill_kernel<kSwiglu>, grid, kThreads, kSharedBytes, stream, p));
}

}  // namespace

void launch_moe_prefill(cudaStream_t stream, const MoeGemmParams& params) {
  launch_checked("moe_prefill", params, [&](auto swiglu) { launch_typed<decltype(swiglu)::value>(stream, params); });
}

}  // namespace moeserve::cuda
