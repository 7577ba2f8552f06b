// Multi-head latent attention decode, version 2: version 1's work and output (mla_decode.cu: the absorbed form over
// the paged latent cache, one block per (query token, split of split_keys <= 64 positions), a partial (max, sum,
// output) per (token, head, split) for the same merge kernel) on tensor cores. Per block the scores are the GEMM
// S = Q~ [heads, 576] x C^T [576, keys] and the output O~ = P [heads, keys] x C [keys, 512], with the token's heads as
// M: mma.sync m16n8k16, bf16 operands, fp32 accumulators.
//
// Tiling: 8 warps, a warp an m16 slab of 16 heads (128 heads a block; more heads take more blocks along grid z).
// A warp keeps its slab's scores for all the split's keys in registers (8 n8 tiles, 32 floats), so the softmax
// over the split is exact (no online rescaling; its max and sum are quad shuffles) and P goes from the score
// accumulators straight into A fragments (16 registers, FlashAttention-2's re-packing), never through shared
// memory. The output is walked 128 columns at a time (16 n8 tiles, 64 floats) and written to the partial as each
// 128 columns finish, so no warp holds more than 64 accumulators.
//   - C: the split's rows, read from memory once per block for all heads: every 16-byte piece issued at once with
//     cp.async, in groups of 64 row values (9 for V3), so the scores' k slabs of group i wait only for group i
//     (one barrier a group). Shared rows of 2 x 576 + 16 bytes (an odd number of 16-byte units: ldmatrix's 8 rows
//     hit 8 bank groups). Scores read them with ldmatrix (B = C^T: keys are N, row values are K), the output with
//     ldmatrix.trans (B = C: keys are K, latent columns are N). fp8 e4m3 rows land as stored in a second area
//     (576 bytes a row), and the thread that copied a piece widens it to bf16 (exactly) once its group is in; the
//     layer's scale joins the score scale and the output in fp32, as in version 1.
//   - Q~: [q~, q_pe] times scale * log2(e) (* the fp8 scale), rounded to bf16 as A fragments, read by each warp
//     straight from global memory (L2): its 16 heads x 576 fp32 values once per block, the next 64 columns' loads
//     in flight (32 floats) while the current 64 are used. Holding the slab's whole Q~ as fragments would take
//     36 k slabs x 4 = 144 registers; Q~ in shared memory would take 147 KB in bf16 (with the rows, past the 227 KB
//     a block may have) and buy nothing: no two warps read the same query values.
// Shared memory (V3, 64 keys a split): 74,752 bytes (bf16) or 111,616 (fp8, with the stored rows), plus 512 for
// the rows' cache offsets: two blocks per H200 multiprocessor, as for version 1 (the split plan assumes two).
// Registers: __launch_bounds__(256, 2) caps them at 128 a thread (ptxas -v, CUDA 13.0, sm_90a: 111 for bf16, 119
// for fp8, no spills, no stack); the most live at once is the scores' phase: 32 accumulators, 32 prefetched query
// floats and 16 A-fragment registers; the output's is 64 accumulators and P's 16 fragment registers.
// Per block at V3's widths and 64 keys: 73,728 bytes of latent rows (bf16) from memory, 294,912 bytes of fp32
// queries from L2 and a 263,168-byte partial written (read again by the merge), for 2 x 128 x 64 x (576 + 512) =
// 17.8 MFLOP (4,352 mma.sync, 544 a warp); each warp reads the rows from shared memory twice (the scores' 576
// values, the output's 512), 16 FLOP a shared byte, so the tensor rate is bound near half of Hopper's dense bf16
// peak by shared-memory bandwidth (128 bytes a clock a multiprocessor) at these 16-row slabs. The queries and the
// partial, 7.6 times the rows' bytes, are what a longer split would amortise; that needs the output accumulated
// across key chunks, which 128 heads x 512 fp32 columns (256 KB) cannot be in one block's registers: FlashMLA's
// shape, 64 heads a block over long key ranges with an online softmax, is the next version.
// Error against version 1 (fp32): q~ and p rounded to bf16 (8 significant bits); tests/runner/cuda/mla_decode_test.cc
// derives the bound.
// CPU reference: cpu::MlaAttention's absorbed form (attend_absorbed), between its two projections.
#include <cmath>

#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/mla_decode.cuh"
#include "runner/cuda/sm90.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kHeadsPerBlock = kWarps * 16;      // a warp's m16 slab
constexpr int kKeyTiles = kMlaMaxSplitKeys / 8;  // n8 tiles of keys of the scores
constexpr int kKeySteps = kMlaMaxSplitKeys / 16;  // k16 steps of keys of the output
constexpr int kGroupSlabs = 4;                   // k16 slabs of the row width per copy group
constexpr int kGroupValues = 16 * kGroupSlabs;   // 64 row values: 128 bytes of a bf16 row, 64 of an fp8 one
constexpr int kColumnTiles = 16;                 // n8 tiles of output columns accumulated at once (128 columns)

// Waits until at most `pending` of this thread's committed cp.async groups are still in flight. The instruction
// takes an immediate: past 8 it waits for 8, which waits for more groups than asked (never fewer).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: sm90::cp_async_wait_group<0>(); break;
    case 1: sm90::cp_async_wait_group<1>(); break;
    case 2: sm90::cp_async_wait_group<2>(); break;
    case 3: sm90::cp_async_wait_group<3>(); break;
    case 4: sm90::cp_async_wait_group<4>(); break;
    case 5: sm90::cp_async_wait_group<5>(); break;
    case 6: sm90::cp_async_wait_group<6>(); break;
    case 7: sm90::cp_async_wait_group<7>(); break;
    default: sm90::cp_async_wait_group<8>(); break;
  }
}

// 16 e4m3 values (a 16-byte piece, low byte first) as 16 bf16 values in two 16-byte halves, exactly.
__device__ __forceinline__ void e4m3x16_to_bf16(const uint4& v, uint4& lo, uint4& hi) {
  lo = make_uint4(e4m3x2_to_bf16x2(v.x), e4m3x2_to_bf16x2(v.x >> 16), e4m3x2_to_bf16x2(v.y),
                  e4m3x2_to_bf16x2(v.y >> 16));
  hi = make_uint4(e4m3x2_to_bf16x2(v.z), e4m3x2_to_bf16x2(v.z >> 16), e4m3x2_to_bf16x2(v.w),
                  e4m3x2_to_bf16x2(v.w >> 16));
}

template <typename CacheElem>
__global__ void __launch_bounds__(kThreads, 2) mla_decode_mma_kernel(MlaDecodeParams p, StepView step,
                                                                    MlaDecodeScratch scratch) {
  pdl_prologue();
  constexpr bool kFp8 = sizeof(CacheElem) == 1;
  constexpr int kPieceValues = 16 / static_cast<int>(sizeof(CacheElem));  // row values per 16-byte copy
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int64_t row_offset[kMlaMaxSplitKeys];  // the split's rows in the cache (elements), -1: none

  const MlaCacheShape shape = p.cache.shape;
  const int L = shape.kv_lora_rank, R = shape.rope_dim, W = L + R;
  const int split_keys = scratch.split_keys;
  const int t = blockIdx.x, split = blockIdx.y;
  MlaSplit range;
  if (!mla_split(step, scratch, t, split, range)) return;
  const int seq = range.seq, k0 = range.k0, n = range.n;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int head0 = blockIdx.z * kHeadsPerBlock + warp * 16;  // the warp's slab: fragment rows g and g + 8
  const bool active = head0 < p.heads;
  const bool row_ok[2] = {head0 + g < p.heads, head0 + g + 8 < p.heads};

  const int row_bytes = 2 * W + 16;
  uint8_t* rows = smem;                             // [split_keys][row_bytes]: bf16
  uint8_t* stored = smem + split_keys * row_bytes;  // fp8: [split_keys][W] bytes as copied

  if (threadIdx.x < split_keys) {
    const int key = threadIdx.x;
    row_offset[key] =
        key < n ? mla_position_offset(shape, step_block_table(step, seq, p.group), p.layer, k0 + key) : -1;
  }

  // Q~ fragments of k slab ks (values 16 ks .. 16 ks + 15 of [q~, q_pe]; L % 16 == 0, so all of one or the
  // other): a0 / a2 are head g's values 16 ks + 2c (+ 8), a1 / a3 head g + 8's; zero past the heads and the width.
  const float q_factor = p.scale * kLog2e * (kFp8 ? p.kv_scale : 1.0f);
  const int64_t q_row = static_cast<int64_t>(t) * p.heads + head0 + g;
  auto q_pair = [&](int r, int value) -> float2 {
    if (!active || !row_ok[r] || value >= W) return make_float2(0.0f, 0.0f);
    const int64_t row = q_row + 8 * r;
    const float* q = value < L ? p.q_latent + row * L + value : p.q_rope + row * R + (value - L);
    return __ldg(reinterpret_cast<const float2*>(q));
  };
  auto load_q = [&](int group, float2 (&q)[kGroupSlabs][4]) {
#pragma unroll
    for (int i = 0; i < kGroupSlabs; ++i) {
      const int value = group * kGroupValues + 16 * i + 2 * c;
      q[i][0] = q_pair(0, value);
      q[i][1] = q_pair(1, value);
      q[i][2] = q_pair(0, value + 8);
      q[i][3] = q_pair(1, value + 8);
    }
  };
  float2 q_next[kGroupSlabs][4];
  load_q(0, q_next);
  __syncthreads();  // row_offset

  // The split's rows, group by group of kGroupValues values: piece j of a group (j = thread + kThreads i) is row
  // j / per_row's pieces j % per_row. The same thread copies and (fp8) widens a piece, so its own wait suffices.
  const CacheElem* cache = static_cast<const CacheElem*>(p.cache.base);
  const int slabs = W / 16, groups = (W + kGroupValues - 1) / kGroupValues;
  auto for_each_piece = [&](int group, auto&& f) {
    const int v0 = group * kGroupValues, per_row = min(kGroupValues, W - v0) / kPieceValues;
    for (int j = threadIdx.x; j < split_keys * per_row; j += kThreads) f(j / per_row, v0 + (j % per_row) * kPieceValues);
  };
  for (int group = 0; group < groups; ++group) {
    for_each_piece(group, [&](int key, int value) {
      const int64_t offset = row_offset[key];  // zero-filled where there is no row: p = 0 must not meet NaN
      uint8_t* dst = kFp8 ? stored + key * W + value : rows + key * row_bytes + value * 2;
      cp_async_16(dst, cache + (offset >= 0 ? offset + value : 0), offset >= 0);
    });
    cp_async_commit();
  }

  // Scores in the log2 domain: keys 8j + 2c + (e % 2) of the split for fragment row g (e < 2) and g + 8.
  float s[kKeyTiles][4] = {};
  const int key_pairs = (n + 15) / 16;  // pairs of n8 key tiles holding the split's keys
  for (int group = 0; group < groups; ++group) {
    uint32_t a[kGroupSlabs][4];
#pragma unroll
    for (int i = 0; i < kGroupSlabs; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) a[i][r] = pack_bf16x2(q_next[i][r].x * q_factor, q_next[i][r].y * q_factor);
    if (group + 1 < groups) load_q(group + 1, q_next);
    cp_async_wait_pending(groups - 1 - group);
    if constexpr (kFp8) {
      for_each_piece(group, [&](int key, int value) {
        uint4 lo, hi;
        e4m3x16_to_bf16(*reinterpret_cast<const uint4*>(stored + key * W + value), lo, hi);
        uint4* dst = reinterpret_cast<uint4*>(rows + key * row_bytes + value * 2);
        dst[0] = lo;
        dst[1] = hi;
      });
    }
    __syncthreads();  // the group's rows, every thread's pieces
    if (!active) continue;
#pragma unroll
    for (int i = 0; i < kGroupSlabs; ++i) {
      const int ks = group * kGroupSlabs + i;
      if (ks >= slabs) break;
      // Lanes 0-7 / 8-15 address keys 0-7 of the pair at values 16 ks + 0 / + 8, lanes 16-31 keys 8-15 the same:
      // b0, b1 of n tile 2jj, then of n tile 2jj + 1.
      const uint8_t* row = rows + (lane / 16 * 8 + lane % 8) * row_bytes + (16 * ks + lane / 8 % 2 * 8) * 2;
#pragma unroll
      for (int jj = 0; jj < kKeyTiles / 2; ++jj) {
        if (jj >= key_pairs) break;
        uint32_t b[4];
        ldmatrix_x4(b, row + 16 * jj * row_bytes);
        mma_bf16_16816(s[2 * jj], a[i], b[0], b[1]);
        mma_bf16_16816(s[2 * jj + 1], a[i], b[2], b[3]);
      }
    }
  }
  if (!active) return;

  // The split's softmax, exact: its max over the quad holding a row, p = 2^(s - m) rounded to bf16 as the output's
  // A fragments (k step kk: keys 16 kk + 2c (+ 1) in a0 / a1, + 8 in a2 / a3), and the sum of the rounded p, so
  // the merged output is the exact average of the rows under the weights it used.
  float m[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * j + 2 * c + e % 2;
      if (key >= n || row_offset[key] < 0) s[j][e] = -INFINITY;
      m[e / 2] = fmaxf(m[e / 2], s[j][e]);
    }
  float l[2] = {0.0f, 0.0f};
  uint32_t pf[kKeySteps][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) m[r] = quad_max(m[r]);
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float e0 = m[r] == -INFINITY ? 0.0f : exp2f(s[j][2 * r] - m[r]);
      const float e1 = m[r] == -INFINITY ? 0.0f : exp2f(s[j][2 * r + 1] - m[r]);
      const uint32_t word = pack_bf16x2(e0, e1);
      pf[j / 2][2 * (j % 2) + r] = word;
      l[r] += bf16_low(word) + bf16_high(word);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    if (c == 0 && row_ok[r]) {
      float* part = mla_partial(p, scratch, t, head0 + g + 8 * r, split);
      part[0] = m[r];
      part[1] = l[r];
    }
  }

  // O~ = P C over the latent columns, 128 at a time. Lanes 0-15 address keys 16 kk + 0..15 at one 16-byte column,
  // lanes 16-31 the same keys at the next: b0, b1 of n tile 2q, then of 2q + 1. Accumulator (nt, e): column
  // 8 nt + 2c + (e % 2) of row g (e < 2) or g + 8.
  const float out_factor = kFp8 ? p.kv_scale : 1.0f;
  const int key_steps = (n + 15) / 16;
  for (int col0 = 0; col0 < L; col0 += 8 * kColumnTiles) {
    float o[kColumnTiles][4] = {};
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      if (kk >= key_steps) break;
      const uint8_t* row = rows + (16 * kk + lane % 16) * row_bytes + (col0 + lane / 16 * 8) * 2;
#pragma unroll
      for (int q = 0; q < kColumnTiles / 2; ++q) {
        if (col0 + 16 * q >= L) break;
        uint32_t v[4];
        ldmatrix_x4_trans(v, row + 32 * q);
        mma_bf16_16816(o[2 * q], pf[kk], v[0], v[1]);
        mma_bf16_16816(o[2 * q + 1], pf[kk], v[2], v[3]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!row_ok[r]) continue;
      float* out = mla_partial(p, scratch, t, head0 + g + 8 * r, split) + 2 + col0 + 2 * c;
#pragma unroll
      for (int nt = 0; nt < kColumnTiles; ++nt)
        if (col0 + 8 * nt < L)
          *reinterpret_cast<float2*>(out + 8 * nt) =
              make_float2(o[nt][2 * r] * out_factor, o[nt][2 * r + 1] * out_factor);
    }
  }
}

template <typename CacheElem>
void launch_typed(cudaStream_t stream, const MlaDecodeParams& p, const StepView& step, const MlaDecodeScratch& scratch) {
  const int bytes = mla_decode_mma_shared_bytes(mla_row_width(p.cache.shape), scratch.split_keys,
                                                static_cast<int>(sizeof(CacheElem)));
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(&mla_decode_mma_kernel<CacheElem>), bytes);
  const dim3 grid(step.num_tokens, scratch.max_splits, (p.heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  MOESERVE_CUDA_CHECK(
      cuda_launch(mla_decode_mma_kernel<CacheElem>, grid, kThreads, bytes, stream, p, step, scratch));
}

}  // namespace

void launch_mla_decode_mma(cudaStream_t stream, const MlaDecodeParams& params, const StepView& step,
                           const MlaDecodeScratch& scratch) {
  if (params.cache.dtype == KvDtype::bf16)
    launch_typed<bf16>(stream, params, step, scratch);
  else
    launch_typed<fp8>(stream, params, step, scratch);
}

}  // namespace moeserve::cuda
