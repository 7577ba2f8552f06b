// Version 1 of prefill attention, kept as attention_bench's baseline (src/runner/cuda/attention_prefill.cu is
// version 2, the one the runner uses): timed beside version 2 and compared with it element by element.
// Flash-style attention for prefill chunks, over the paged KV cache (so earlier chunks' keys are seen), with
// sinks and sliding windows, on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulators).
// Grid: (64-row query tile of one sequence, query head); 4 warps, 16 query rows each. Per 64-key tile: K and V
// rows are copied to shared memory (cp.async, zero-filled outside the tile's key range), S = Q K^T in registers,
// masked (causal and window) and scaled into the log2 domain, an online softmax whose running max starts at
// the sink, then O += P V with P re-packed from the S accumulators as the A operand and V read by
// ldmatrix.trans. At the end the sink joins the denominator once: o = O / (l + e^(sink - m)).
// Tree steps (at most 64 tokens, so one tile at row 0): a row's keys run to its own slot, its window starts from
// its position (start + depth), and the step's keys among them must pass its tree mask.
// fp8 KV: each thread loads 8 e4m3 values of a row and stores them as bf16 (exact), so the tile is a bf16 tile;
// the layer's k_scale joins the score scale and v_scale the output.
// Version 1: single-buffered tiles, no GQA sharing of K/V tiles between the heads of a group (they meet in L2).
// head_dim must be 64. CPU reference: cpu::attend_one_head per query row.
#include "attention_prefill_v1.h"

#include <cmath>

#include "runner/cuda/kv_dtype.cuh"

namespace moeserve::bench_cuda {
namespace {

using namespace moeserve::cuda;

constexpr int kHeadDim = 64;
constexpr int kTileRows = 64;  // query rows per block
constexpr int kTileKeys = 64;
constexpr int kRowStride = kHeadDim + 8;  // bf16 elements; 144-byte rows keep ldmatrix and fragment loads conflict-free

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

// Row r's 8-element piece `chunk` of K and of V into the tiles (zeros where offset < 0: outside the tile's keys).
__device__ __forceinline__ void load_piece(const bf16* cache, int64_t offset, int64_t v_minus_k, bf16* k_dst, bf16* v_dst) {
  const bool ok = offset >= 0;
  cp_async_16(k_dst, ok ? cache + offset : cache, ok);
  cp_async_16(v_dst, ok ? cache + offset + v_minus_k : cache, ok);
}
__device__ __forceinline__ void load_piece(const fp8* cache, int64_t offset, int64_t v_minus_k, bf16* k_dst, bf16* v_dst) {
  uint2 k = make_uint2(0, 0), v = make_uint2(0, 0);
  if (offset >= 0) {
    k = *reinterpret_cast<const uint2*>(cache + offset);
    v = *reinterpret_cast<const uint2*>(cache + offset + v_minus_k);
  }
  *reinterpret_cast<uint4*>(k_dst) = make_uint4(e4m3x2_to_bf16x2(k.x), e4m3x2_to_bf16x2(k.x >> 16),
                                                e4m3x2_to_bf16x2(k.y), e4m3x2_to_bf16x2(k.y >> 16));
  *reinterpret_cast<uint4*>(v_dst) = make_uint4(e4m3x2_to_bf16x2(v.x), e4m3x2_to_bf16x2(v.x >> 16),
                                                e4m3x2_to_bf16x2(v.y), e4m3x2_to_bf16x2(v.y >> 16));
}

// kTree: the step has tree masks (a causal step's kernel skips them). KvElem: bf16 or fp8 (the cache's type).
template <bool kTree, typename KvElem>
__global__ void __launch_bounds__(128) attention_prefill_kernel(AttentionParams p, StepView step) {
  constexpr bool kFp8 = sizeof(KvElem) == 1;
  __shared__ __align__(16) bf16 k_s[kTileKeys][kRowStride];
  __shared__ __align__(16) bf16 v_s[kTileKeys][kRowStride];

  const int head = blockIdx.y, kv_head = head / (p.heads / p.kv_heads);
  const int seq = step.q_tile_seq[blockIdx.x];
  const int row0 = step.q_tile_row0[blockIdx.x];
  const int q_len = step.seq_q_len[seq];
  const int q_start = step.seq_q_start[seq];
  const int start_position = step.seq_context[seq] - q_len;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int row_a = row0 + warp * 16 + g, row_b = row_a + 8;  // this thread's two query rows
  const int slot_a = start_position + row_a, slot_b = start_position + row_b;  // their KV slots
  const int pos_a = kTree && row_a < q_len ? step.positions[q_start + row_a] : slot_a;  // start + depth in a tree
  const int pos_b = kTree && row_b < q_len ? step.positions[q_start + row_b] : slot_b;
  const int lo_a = p.window > 0 ? max(0, pos_a - p.window + 1) : 0;
  const int lo_b = p.window > 0 ? max(0, pos_b - p.window + 1) : 0;
  const bool sliding = p.window > 0;
  const uint64_t mask_a = kTree && row_a < q_len ? tree_mask(step, q_start + row_a, sliding) : ~0ull;
  const uint64_t mask_b = kTree && row_b < q_len ? tree_mask(step, q_start + row_b, sliding) : ~0ull;

  // Q fragments (A operand) for the four 16-wide k steps of head_dim, straight from global memory.
  const bf16* q = static_cast<const bf16*>(p.q);
  auto q_word = [&](int row, int col) -> uint32_t {
    if (row >= q_len) return 0u;
    return *reinterpret_cast<const uint32_t*>(q + (static_cast<int64_t>(q_start + row) * p.heads + head) * kHeadDim + col);
  };
  uint32_t q_frag[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    q_frag[ks][0] = q_word(row_a, 16 * ks + 2 * c);
    q_frag[ks][1] = q_word(row_b, 16 * ks + 2 * c);
    q_frag[ks][2] = q_word(row_a, 16 * ks + 8 + 2 * c);
    q_frag[ks][3] = q_word(row_b, 16 * ks + 8 + 2 * c);
  }

  const float sink = p.sinks[head] * kLog2e;
  const float qk_scale = p.scale * kLog2e * (kFp8 ? p.k_scale : 1.0f);
  float o[8][4] = {};
  float m_a = sink, m_b = sink, l_a = 0.0f, l_b = 0.0f;

  // The tile's lowest position is its first row's (a tree's root sits at start_position, depth 0).
  const int first_position = start_position + row0;
  const int last_slot = start_position + min(row0 + kTileRows, q_len) - 1;
  const int key_lo = p.window > 0 ? max(0, first_position - p.window + 1) : 0;
  const KvElem* cache = static_cast<const KvElem*>(p.kv.base);
  const int64_t v_minus_k = static_cast<int64_t>(p.kv.kv_heads) * p.kv.block_size * kHeadDim;

  for (int tile = key_lo / kTileKeys * kTileKeys; tile <= last_slot; tile += kTileKeys) {
    for (int i = threadIdx.x; i < kTileKeys * 8; i += blockDim.x) {
      const int r = i / 8, chunk = i % 8, key = tile + r;
      int64_t offset = -1;
      if (key >= key_lo && key <= last_slot) offset = kv_offset(p.kv, step, seq, p.group, p.slot, 0, kv_head, key);
      load_piece(cache, offset < 0 ? -1 : offset + chunk * 8, v_minus_k, &k_s[r][chunk * 8], &v_s[r][chunk * 8]);
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    float s[8][4] = {};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&k_s[8 * j + g][16 * ks + 2 * c]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&k_s[8 * j + g][16 * ks + 8 + 2 * c]);
        mma_bf16_16816(s[j], q_frag[ks], b0, b1);
      }
    }
    float max_a = -INFINITY, max_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = tile + 8 * j + 2 * c + e;
        const bool seen_a = key <= slot_a && key >= lo_a && (!kTree || tree_visible(mask_a, key, start_position));
        const bool seen_b = key <= slot_b && key >= lo_b && (!kTree || tree_visible(mask_b, key, start_position));
        s[j][e] = seen_a ? s[j][e] * qk_scale : -INFINITY;
        s[j][2 + e] = seen_b ? s[j][2 + e] * qk_scale : -INFINITY;
        max_a = fmaxf(max_a, s[j][e]);
        max_b = fmaxf(max_b, s[j][2 + e]);
      }
    }
    const float new_a = fmaxf(m_a, quad_max(max_a)), new_b = fmaxf(m_b, quad_max(max_b));
    const float alpha_a = exp2f(m_a - new_a), alpha_b = exp2f(m_b - new_b);
    m_a = new_a;
    m_b = new_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[j][0] *= alpha_a;
      o[j][1] *= alpha_a;
      o[j][2] *= alpha_b;
      o[j][3] *= alpha_b;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = exp2f(s[j][e] - m_a);
        s[j][2 + e] = exp2f(s[j][2 + e] - m_b);
        l_a += s[j][e];
        l_b += s[j][2 + e];
      }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t p_frag[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                  pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int jd = 0; jd < 8; ++jd) {
        uint32_t b0, b1;
        ldmatrix_x2_trans(b0, b1, &v_s[16 * kk + lane % 16][8 * jd]);
        mma_bf16_16816(o[jd], p_frag, b0, b1);
      }
    }
    __syncthreads();
  }

  const float v_scale = kFp8 ? p.v_scale : 1.0f;
  l_a = (quad_sum(l_a) + exp2f(sink - m_a)) / v_scale;
  l_b = (quad_sum(l_b) + exp2f(sink - m_b)) / v_scale;
  bf16* out = static_cast<bf16*>(p.out);
#pragma unroll
  for (int jd = 0; jd < 8; ++jd) {
    const int col = 8 * jd + 2 * c;
    if (row_a < q_len)
      *reinterpret_cast<uint32_t*>(out + (static_cast<int64_t>(q_start + row_a) * p.heads + head) * kHeadDim + col) =
          pack_bf16x2(o[jd][0] / l_a, o[jd][1] / l_a);
    if (row_b < q_len)
      *reinterpret_cast<uint32_t*>(out + (static_cast<int64_t>(q_start + row_b) * p.heads + head) * kHeadDim + col) =
          pack_bf16x2(o[jd][2] / l_b, o[jd][3] / l_b);
  }
}

}  // namespace

void launch_attention_prefill_v1(cudaStream_t stream, const AttentionParams& params, const StepView& step) {
  if (step.num_q_tiles == 0) return;
  if (params.head_dim != kHeadDim) fail_cuda("attention_prefill_v1", "head_dim must be 64", __FILE__, __LINE__);
  const dim3 grid(step.num_q_tiles, params.heads);
  const bool tree = step.tree_masks != nullptr;
  switch (params.kv.dtype) {
    case KvDtype::bf16:
      (tree ? attention_prefill_kernel<true, bf16> : attention_prefill_kernel<false, bf16>)<<<grid, 128, 0, stream>>>(
          params, step);
      break;
    case KvDtype::fp8_e4m3:
      (tree ? attention_prefill_kernel<true, fp8> : attention_prefill_kernel<false, fp8>)<<<grid, 128, 0, stream>>>(
          params, step);
      break;
    default: fail_cuda("attention_prefill_v1", "the KV cache must be bf16 or fp8", __FILE__, __LINE__);
  }
  MOESERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace moeserve::bench_cuda
