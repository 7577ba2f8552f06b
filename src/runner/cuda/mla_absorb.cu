// The two per-head projections around absorbed MLA (mla_decode.cu), through kv_b_proj's blocks: per head h,
// W_UK^h (its nope_dim rows of kv_b) and W_UV^h (the v_dim rows after them), each [*, kv_lora_rank]:
//   absorption:    q~[t, h] = W_UK^h^T q_nope[t, h]   per head [T x nope_dim] x [nope_dim x kv_lora_rank]; q_pe rotated
//   un-absorption: o[t, h]  = W_UV^h o~[t, h]         per head [T x kv_lora_rank] x [kv_lora_rank x v_dim]
// One tiled kernel serves both: a block takes one head, 32 tokens and 64 output columns, stages 32-deep tiles of the
// activations and of kv_b in shared memory (kv_b read along its rows for W_UK, across them for W_UV, each time with
// consecutive threads on consecutive bytes), and each thread accumulates 2 x 4 outputs by fmaf in ascending k from
// zero: the order of cpu::add_scaled_row, so absorption gives the CPU's sums term for term. kv_b is dequantised
// exactly to fp32 as it is read (fp8: e4m3 value times its block's scale, one rounding, as Fp8BlockMatrix::at).
// Warps whose four token rows all lie past T skip the products (decode steps fill one row of 32).
//
// Cost at DeepSeek-V3's widths (128 heads, nope = v = 128, kv_lora_rank 512), per projection and layer: 8.4 M kv_b
// elements (8.4 MB fp8, 16.8 MB bf16) read once per 32-token tile, and 2 T x 8.4 M FLOPs on CUDA cores in fp32. At
// decode (T <= 64) that is the weights' bytes, a few microseconds at H100's ~3 TB/s; at prefill, 17 GFLOP per 1,000
// tokens, milliseconds on CUDA cores: long prefills want tensor cores (batched GEMMs, or the naive form).
// CPU reference: cpu::MlaAttention's absorbed form: forward's RoPE on q_pe, attend_absorbed's q~ and its W_UV step.
#include <cuda_fp8.h>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTileRows = 32;  // tokens
constexpr int kTileCols = 64;  // output columns of the head
constexpr int kTileK = 32;

// One head's product C[t, n] = sum_k A[t, k] B[k, n] for T tokens, head h = blockIdx.z:
// A[t, k] at a[t * a_token + h * a_head + k], B[k, n] = kv_b[w_row + k, n] (absorption) or kv_b[w_row + n, k]
// (un-absorption, kTransposed), w_row = h * (nope_dim + v_dim) + w_offset, and C[t, n] at
// out[t * out_token + h * out_head + n].
struct HeadProduct {
  const float* a = nullptr;
  int64_t a_token = 0, a_head = 0;
  MlaKvbView kv_b;
  int w_offset = 0;  // 0: W_UK; nope_dim: W_UV
  int K = 0, N = 0;
  void* out = nullptr;
  int64_t out_token = 0, out_head = 0;
  int T = 0;
};

// Absorption's second output: q_pe (A's row after its nope_dim values) rotated by rope_adjacent_pairs into q_rope
// (unused by un-absorption).
struct QRope {
  float* q_rope = nullptr;  // [T, heads, rope_dim]
  int rope_dim = 0;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  float factor = 1.0f;
};

__device__ __forceinline__ float e4m3_to_float(uint8_t byte) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));
}

// kv_b's element (row, col) in fp32.
template <MlaWeightType kType>
__device__ __forceinline__ float kv_b_at(const MlaKvbView& w, int64_t row, int col) {
  const int64_t i = row * w.kv_lora_rank + col;
  if constexpr (kType == MlaWeightType::f32) {
    return static_cast<const float*>(w.values)[i];
  } else if constexpr (kType == MlaWeightType::bf16) {
    return __bfloat162float(static_cast<const bf16*>(w.values)[i]);
  } else {
    const float scale = w.scales[row / kFp8Block * fp8_weight_scale_ld(w.kv_lora_rank) + col / kFp8Block];
    return e4m3_to_float(static_cast<const uint8_t*>(w.values)[i]) * scale;
  }
}

// As cpu::rope_adjacent_pairs (and mla_cache_write.cu): fp32 angle, cos and sin times the factor.
__device__ void rotate_q_pe(const HeadProduct& p, const QRope& rope, int h, int t0) {
  const int pairs = rope.rope_dim / 2;
  for (int i = threadIdx.x; i < kTileRows * pairs; i += kThreads) {
    const int t = t0 + i / pairs, j = i % pairs;
    if (t >= p.T) break;
    const float* x = p.a + t * p.a_token + h * p.a_head + p.K + 2 * j;
    float* y = rope.q_rope + (static_cast<int64_t>(t) * p.kv_b.heads + h) * rope.rope_dim + 2 * j;
    const float angle = static_cast<float>(rope.positions[t]) * rope.inv_freq[j];
    const float c = cosf(angle) * rope.factor, s = sinf(angle) * rope.factor;
    y[0] = x[0] * c - x[1] * s;
    y[1] = x[1] * c + x[0] * s;
  }
}

template <MlaWeightType kType, bool kTransposed, typename Out>
__global__ void __launch_bounds__(kThreads) head_product_kernel(HeadProduct p, QRope rope) {
  pdl_prologue();
  __shared__ float a_tile[kTileK][kTileRows + 1];  // +1: the k-fastest stores hit 32 banks
  __shared__ float b_tile[kTileK][kTileCols + 1];
  const int h = blockIdx.z, t0 = blockIdx.x * kTileRows, n0 = blockIdx.y * kTileCols;
  if constexpr (!kTransposed)
    if (blockIdx.y == 0) rotate_q_pe(p, rope, h, t0);
  const int64_t w_row = static_cast<int64_t>(h) * (p.kv_b.nope_dim + p.kv_b.v_dim) + p.w_offset;
  const int col = threadIdx.x % 16, row = threadIdx.x / 16 * 2;  // outputs (row + i, col + 16 j)
  const bool warp_active = t0 + threadIdx.x / 32 * 4 < p.T;     // warp w holds rows 4 w .. 4 w + 3
  float acc[2][4] = {};
  for (int k0 = 0; k0 < p.K; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTileRows * kTileK; i += kThreads) {
      const int kk = i % kTileK, r = i / kTileK, t = t0 + r, k = k0 + kk;
      a_tile[kk][r] = t < p.T && k < p.K ? p.a[t * p.a_token + h * p.a_head + k] : 0.0f;
    }
    for (int i = threadIdx.x; i < kTileK * kTileCols; i += kThreads) {
      const int kk = kTransposed ? i % kTileK : i / kTileCols, nn = kTransposed ? i / kTileK : i % kTileCols;
      const int k = k0 + kk, n = n0 + nn;
      float w = 0.0f;
      if (k < p.K && n < p.N)
        w = kTransposed ? kv_b_at<kType>(p.kv_b, w_row + n, k) : kv_b_at<kType>(p.kv_b, w_row + k, n);
      b_tile[kk][nn] = w;
    }
    __syncthreads();
    if (warp_active)
      for (int kk = 0; kk < kTileK; ++kk)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a_tile[kk][row + i], b_tile[kk][col + 16 * j], acc[i][j]);
    __syncthreads();
  }
  Out* out = static_cast<Out*>(p.out) + h * p.out_head;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int t = t0 + row + i, n = n0 + col + 16 * j;
      if (t < p.T && n < p.N) out[t * p.out_token + n] = from_float<Out>(acc[i][j]);
    }
}

void check_kv_b(const MlaKvbView& w, const char* what) {
  if (w.heads <= 0 || w.nope_dim <= 0 || w.v_dim <= 0 || w.kv_lora_rank <= 0)
    fail_cuda(what, "kv_b's heads, nope_dim, v_dim and kv_lora_rank must be positive", __FILE__, __LINE__);
  if (w.type == MlaWeightType::fp8_block && w.scales == nullptr)
    fail_cuda(what, "an fp8 kv_b needs its block scales", __FILE__, __LINE__);
}

template <bool kTransposed, typename Out>
void launch_head_product(cudaStream_t stream, const HeadProduct& p, const QRope& rope) {
  const dim3 grid((p.T + kTileRows - 1) / kTileRows, (p.N + kTileCols - 1) / kTileCols, p.kv_b.heads);
  switch (p.kv_b.type) {
    case MlaWeightType::f32:
      MOESERVE_CUDA_CHECK(cuda_launch(head_product_kernel<MlaWeightType::f32, kTransposed, Out>, grid, kThreads, 0,
                                      stream, p, rope));
      break;
    case MlaWeightType::bf16:
      MOESERVE_CUDA_CHECK(cuda_launch(head_product_kernel<MlaWeightType::bf16, kTransposed, Out>, grid, kThreads, 0,
                                      stream, p, rope));
      break;
    case MlaWeightType::fp8_block:
      MOESERVE_CUDA_CHECK(cuda_launch(head_product_kernel<MlaWeightType::fp8_block, kTransposed, Out>, grid, kThreads,
                                      0, stream, p, rope));
      break;
  }
}

}  // namespace

void launch_mla_absorb(cudaStream_t stream, const MlaAbsorbParams& params, const StepView& step) {
  const MlaKvbView& w = params.kv_b;
  check_kv_b(w, "mla_absorb");
  if (params.rope_dim <= 0 || params.rope_dim % 2 != 0)
    fail_cuda("mla_absorb", "rope_dim must be positive and even", __FILE__, __LINE__);
  if (step.num_tokens == 0) return;
  const int qk = w.nope_dim + params.rope_dim;
  HeadProduct p;
  p.a = params.q;
  p.a_token = static_cast<int64_t>(w.heads) * qk;
  p.a_head = qk;
  p.kv_b = w;
  p.w_offset = 0;
  p.K = w.nope_dim;
  p.N = w.kv_lora_rank;
  p.out = params.q_latent;
  p.out_token = static_cast<int64_t>(w.heads) * w.kv_lora_rank;
  p.out_head = w.kv_lora_rank;
  p.T = step.num_tokens;
  const QRope rope{params.q_rope, params.rope_dim, step.positions, params.inv_freq, params.rope_factor};
  launch_head_product<false, float>(stream, p, rope);
}

void launch_mla_unabsorb(cudaStream_t stream, Precision out_type, const MlaUnabsorbParams& params, int T) {
  const MlaKvbView& w = params.kv_b;
  check_kv_b(w, "mla_unabsorb");
  if (T == 0) return;
  HeadProduct p;
  p.a = params.latent_out;
  p.a_token = static_cast<int64_t>(w.heads) * w.kv_lora_rank;
  p.a_head = w.kv_lora_rank;
  p.kv_b = w;
  p.w_offset = w.nope_dim;
  p.K = w.kv_lora_rank;
  p.N = w.v_dim;
  p.out = params.out;
  p.out_token = static_cast<int64_t>(w.heads) * w.v_dim;
  p.out_head = w.v_dim;
  p.T = T;
  if (out_type == Precision::bf16)
    launch_head_product<true, bf16>(stream, p, QRope{});
  else
    launch_head_product<true, float>(stream, p, QRope{});
}

}  // namespace moeserve::cuda
