// Decode attention on tensor cores over the paged KV cache (bf16 or fp8 e4m3), with sinks, sliding windows and
// tree masks: the bf16 path's attention for every sequence without prefill tiles (decode tokens, verify runs,
// short chunks). Version 3 (version 2, per-lane dot products, is attention_decode_f32.cu, the fp32 path's).
//
// Work: a query group is 16 rows = (16 / heads-per-KV) consecutive tokens of one sequence x the query heads of
// one KV head (GQA: gpt-oss's 8 heads, so 2 tokens; a decode token fills 8 rows). Grid (group, KV head, split):
// a block of 4 warps takes one key range of its group, each warp every 4th 32-key tile of it, so each K and V
// row is read from memory once for all 8 query heads. Each warp streams its tiles through its own 3-stage
// cp.async pipeline (16-byte copies, 4 rows of 128 bytes per instruction) into padded shared rows, and:
//   S = Q K^T   mma.sync m16n8k16: rows as M (q fragments held in registers), keys as N, K via ldmatrix;
//   an online softmax in the log2 domain whose running max starts at the sink (so it is finite from the start);
//   O += P V    P re-packed from the S accumulators as the A operand, V via ldmatrix.trans.
// bf16 KV runs bf16 mma. fp8 KV runs fp16 mma: q is converted to fp16, e4m3 pairs become fp16 pairs exactly
// (kv_dtype.cuh), the layer's k_scale joins the score scale and v_scale the output. An fp8 row is 64 bytes, so a
// 16-bit ldmatrix element holds two dims: the K operand's 16 dims of a k step are taken in the order 4c..4c+3 per
// lane (q uses the same order, a dot product does not care), and V's transposed pairs are split into an even-dim
// and an odd-dim n tile with byte permutes.
// The warps merge in shared memory; with one split the block writes the output, else a partial (max, sum,
// output) and the last block of the group to finish (a counter, threadFenceReduction's pattern in the CUDA
// samples) merges all splits with the sink: o = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink - m)), and
// resets the counter for the next launch (so graphs replay it).
// Splits: the host fixes the most a launch may use from (groups x KV heads) against the resident blocks of the
// GPU (attention_decode_max_splits); each group then uses as many of them as its context has 64-key pieces.
// head_dim must be 64. CPU reference: cpu::attend_one_head per (token, head).
#include <algorithm>
#include <climits>
#include <cmath>

#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kHeadDim = kAttentionHeadDim;
constexpr int kRows = kDecodeTileRows;
constexpr int kWarps = 4;
constexpr int kTileKeys = 32;   // keys per warp per pipeline stage
constexpr int kStages = 3;      // two tiles in flight while one is computed
constexpr int kMaxSplits = 32;
constexpr int kMinSplitKeys = 64;
constexpr int kPartialStride = 4 + kHeadDim;  // floats per partial row: max, sum, 2 unused (16-byte rows), output
constexpr int kMergeStride = kHeadDim + 4;    // floats per row of the warps' merge area

template <typename KvElem>
struct KvLayout {
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(KvElem));
  static constexpr int kStride = kRowBytes + 16;  // 144 or 80 bytes: ldmatrix's 8 rows hit distinct banks
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte copies per row
  static constexpr int kTileBytes = kTileKeys * kStride;
  static constexpr int kSharedBytes = kWarps * kStages * 2 * kTileBytes;
};

template <typename KvElem>
constexpr int shared_bytes() {
  constexpr int merge = kWarps * kRows * (2 + kMergeStride) * 4;
  return KvLayout<KvElem>::kSharedBytes > merge ? KvLayout<KvElem>::kSharedBytes : merge;
}

template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <typename KvElem>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (sizeof(KvElem) == 2)
    mma_bf16_16816(d, a, b0, b1);
  else
    mma_f16_16816(d, a, b0, b1);
}

// What one of a thread's two rows sees: keys lo..last, those of the step passing the tree mask.
struct RowKeys {
  int lo = 0, last = 0;
  uint64_t mask = ~0ull;
};

template <typename KvElem, int kPerKv>
__global__ void __launch_bounds__(kWarps * 32) attention_decode_kernel(AttentionParams p, StepView step,
                                                                      DecodeScratch scratch) {
  pdl_prologue();
  using L = KvLayout<KvElem>;
  constexpr bool kFp8 = sizeof(KvElem) == 1;
  constexpr int kTokens = kRows / kPerKv;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int last_block;

  const int group = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int token0 = step.decode_token0[group];
  const int seq = step.token_seq[token0];
  const int q_len = step.seq_q_len[seq];
  const int count = min(kTokens, step.seq_q_start[seq] + q_len - token0);
  const int start_position = step.seq_context[seq] - q_len;
  const bool sliding = p.window > 0;
  auto keys_of = [&](int token) {
    RowKeys k;
    k.last = token_slot(step, token, seq);
    k.lo = sliding ? max(0, step.positions[token] - p.window + 1) : 0;
    k.mask = tree_mask(step, token, sliding);
    return k;
  };

  // The group's key range (the union of its tokens') and the part every token sees.
  int lo_min = INT_MAX, lo_max = 0, hi_min = INT_MAX, hi_max = 0;
  for (int i = 0; i < count; ++i) {
    const RowKeys k = keys_of(token0 + i);
    lo_min = min(lo_min, k.lo);
    lo_max = max(lo_max, k.lo);
    hi_min = min(hi_min, k.last);
    hi_max = max(hi_max, k.last);
  }
  const int keys = hi_max - lo_min + 1;
  const int wanted = min(scratch.max_splits, (keys + kMinSplitKeys - 1) / kMinSplitKeys);
  const int chunk = (keys + wanted - 1) / wanted;
  const int chunk_keys = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;  // tiles never straddle two splits
  const int splits = (keys + chunk_keys - 1) / chunk_keys;
  if (split >= splits) return;
  const int k_begin = lo_min + split * chunk_keys, k_end = min(hi_max + 1, k_begin + chunk_keys);

  // This thread's rows g and g + 8: (token, head) = (r / kPerKv, r % kPerKv); rows past the group's tokens
  // repeat its last token (computed, never written).
  const int row_token[2] = {min(g / kPerKv, count - 1), min((g + 8) / kPerKv, count - 1)};
  const RowKeys row_keys[2] = {keys_of(token0 + row_token[0]), keys_of(token0 + row_token[1])};
  const bool tree = step.tree_masks != nullptr;
  auto head_of = [&](int r) { return kv_head * kPerKv + r % kPerKv; };

  // Q as the A operand, four k steps of 16 dims; zero for rows past the group. fp8: fp16, dims 4c..4c+3 per k step.
  const bf16* q = static_cast<const bf16*>(p.q);
  auto q_word = [&](int r, int col) -> uint32_t {
    if (r / kPerKv >= count) return 0u;
    return *reinterpret_cast<const uint32_t*>(
        q + (static_cast<int64_t>(token0 + r / kPerKv) * p.heads + head_of(r)) * kHeadDim + col);
  };
  uint32_t q_frag[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    if constexpr (kFp8) {
      q_frag[ks][0] = bf16x2_to_f16x2(q_word(g, 16 * ks + 4 * c));
      q_frag[ks][1] = bf16x2_to_f16x2(q_word(g + 8, 16 * ks + 4 * c));
      q_frag[ks][2] = bf16x2_to_f16x2(q_word(g, 16 * ks + 4 * c + 2));
      q_frag[ks][3] = bf16x2_to_f16x2(q_word(g + 8, 16 * ks + 4 * c + 2));
    } else {
      q_frag[ks][0] = q_word(g, 16 * ks + 2 * c);
      q_frag[ks][1] = q_word(g + 8, 16 * ks + 2 * c);
      q_frag[ks][2] = q_word(g, 16 * ks + 8 + 2 * c);
      q_frag[ks][3] = q_word(g + 8, 16 * ks + 8 + 2 * c);
    }
  }

  const float qk_scale = p.scale * kLog2e * (kFp8 ? p.k_scale : 1.0f);
  float m[2] = {p.sinks[head_of(g)] * kLog2e, p.sinks[head_of(g + 8)] * kLog2e};
  float l[2] = {0.0f, 0.0f};
  float o[8][4] = {};

  const uint8_t* cache = static_cast<const uint8_t*>(p.kv.base);
  const int64_t v_minus_k = static_cast<int64_t>(p.kv.kv_heads) * p.kv.block_size * kHeadDim;  // elements
  uint8_t* warp_smem = smem + warp * kStages * 2 * L::kTileBytes;
  const int tiles = (k_end - k_begin + kTileKeys - 1) / kTileKeys;
  const int my_tiles = tiles > warp ? (tiles - warp + kWarps - 1) / kWarps : 0;
  auto tile_key0 = [&](int i) { return k_begin + (warp + kWarps * i) * kTileKeys; };

  // Lane l finds key (tile start + l)'s row; each copy instruction then moves kChunks 16-byte pieces of each of
  // 32 / kChunks rows (whole 128-byte lines), zero-filled past the range (probabilities 0 must not meet NaNs).
  auto issue = [&](int i) {
    const int key = tile_key0(i) + lane;
    const long long offset = key < k_end ? kv_offset(p.kv, step, seq, p.group, p.slot, 0, kv_head, key) : -1;
    uint8_t* k_s = warp_smem + (i % kStages) * 2 * L::kTileBytes;
    uint8_t* v_s = k_s + L::kTileBytes;
    constexpr int kRowsPerCopy = 32 / L::kChunks;
#pragma unroll
    for (int j = 0; j < kTileKeys / kRowsPerCopy; ++j) {
      const int r = j * kRowsPerCopy + lane / L::kChunks, piece = lane % L::kChunks;
      const long long row = __shfl_sync(0xffffffffu, offset, r);
      const bool ok = row >= 0;
      const uint8_t* k_src = cache + (ok ? row * static_cast<long long>(sizeof(KvElem)) + piece * 16 : 0);
      cp_async_16(k_s + r * L::kStride + piece * 16, k_src, ok);
      cp_async_16(v_s + r * L::kStride + piece * 16, ok ? k_src + v_minus_k * sizeof(KvElem) : cache, ok);
    }
  };

  auto compute = [&](int i) {
    const int key0 = tile_key0(i);
    const uint8_t* k_s = warp_smem + (i % kStages) * 2 * L::kTileBytes;
    const uint8_t* v_s = k_s + L::kTileBytes;
    float s[4][4] = {};
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // 8 keys each
      const uint8_t* row = k_s + (8 * j + lane % 8) * L::kStride + (lane / 8) * 16;
      if constexpr (kFp8) {
        uint32_t kf[4];
        ldmatrix_x4(kf, row);  // matrix ks: dims 16ks..16ks+15, this lane's 4c..4c+3
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) mma<KvElem>(s[j], q_frag[ks], e4m3x2_to_f16x2(kf[ks]), e4m3x2_to_f16x2(kf[ks] >> 16));
      } else {
        uint32_t lo[4], hi[4];
        ldmatrix_x4(lo, row);       // dims 0..31 in four 8-dim matrices
        ldmatrix_x4(hi, row + 64);  // dims 32..63
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          mma<KvElem>(s[j], q_frag[ks], lo[2 * ks], lo[2 * ks + 1]);
          mma<KvElem>(s[j], q_frag[2 + ks], hi[2 * ks], hi[2 * ks + 1]);
        }
      }
    }
    // Scale, mask (only tiles not inside every row's visible range, or in a tree step), online softmax.
    const bool whole = !tree && key0 >= lo_max && key0 + kTileKeys - 1 <= hi_min;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, key = key0 + 8 * j + 2 * c + e % 2;
        const RowKeys& k = row_keys[r];
        const bool seen = whole || (key >= k.lo && key <= k.last && (!tree || tree_visible(k.mask, key, start_position)));
        s[j][e] = seen ? s[j][e] * qk_scale : -INFINITY;
        tile_max[r] = fmaxf(tile_max[r], s[j][e]);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(tile_max[r]));
      alpha[r] = exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - m[e / 2]);
        l[e / 2] += s[j][e];
      }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {  // 16 keys each
      uint32_t p_frag[4];
      if constexpr (kFp8) {
        p_frag[0] = pack_f16x2(s[2 * kk][0], s[2 * kk][1]);
        p_frag[1] = pack_f16x2(s[2 * kk][2], s[2 * kk][3]);
        p_frag[2] = pack_f16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p_frag[3] = pack_f16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      } else {
        p_frag[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
        p_frag[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
        p_frag[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p_frag[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
      // Lanes 0-15 address keys 16kk + 0..15 at one 16-byte column, lanes 16-31 the same keys at the next.
      const uint8_t* row = v_s + (16 * kk + lane % 16) * L::kStride + (lane / 16) * 16;
#pragma unroll
      for (int col = 0; col < L::kChunks; col += 2) {
        uint32_t v[4];
        ldmatrix_x4_trans(v, row + col * 16);
        if constexpr (kFp8) {
          // v[0], v[1]: keys 2c, 2c+1 (+8) of dims 2g, 2g+1 of 16-dim column `col`; v[2], v[3] of column col + 1.
          // n tile 2 * column + 0 holds the even dims, + 1 the odd ones.
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const uint32_t a = v[2 * half], b = v[2 * half + 1];
            const int n = 2 * (col + half);
            mma<KvElem>(o[n], p_frag, e4m3x2_to_f16x2(__byte_perm(a, 0, 0x20)), e4m3x2_to_f16x2(__byte_perm(b, 0, 0x20)));
            mma<KvElem>(o[n + 1], p_frag, e4m3x2_to_f16x2(__byte_perm(a, 0, 0x31)),
                        e4m3x2_to_f16x2(__byte_perm(b, 0, 0x31)));
          }
        } else {
          mma<KvElem>(o[col], p_frag, v[0], v[1]);  // dims 8col..8col+7
          mma<KvElem>(o[col + 1], p_frag, v[2], v[3]);
        }
      }
    }
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < my_tiles) issue(i);
    cp_async_commit();
  }
  for (int i = 0; i < my_tiles; ++i) {
    if (i + kStages - 1 < my_tiles) issue(i + kStages - 1);  // into the stage computed at i - 1
    cp_async_commit();
    cp_async_wait_group<kStages - 1>();  // tile i's copies (this lane's) have landed
    __syncwarp();                        // and every lane's
    compute(i);
    __syncwarp();  // the stage is refilled at i + 1
  }
  cp_async_wait_all();
  __syncthreads();  // the pipeline's shared memory becomes the merge area

  // Warps' (max, sum, output) per row; output column of accumulator (n, e): bf16 8n + 2c + e % 2; fp8 n = 2 * col
  // + parity: 16 col + 4c + 2 (e % 2) + parity.
  float* m_s = reinterpret_cast<float*>(smem);
  float* l_s = m_s + kWarps * kRows;
  float* o_s = l_s + kWarps * kRows;
  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);
  if (c == 0)
    for (int r = 0; r < 2; ++r) {
      m_s[warp * kRows + g + 8 * r] = m[r];
      l_s[warp * kRows + g + 8 * r] = l[r];
    }
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int dim = kFp8 ? 16 * (n / 2) + 4 * c + 2 * (e % 2) + n % 2 : 8 * n + 2 * c + e % 2;
      o_s[(warp * kRows + g + 8 * (e / 2)) * kMergeStride + dim] = o[n][e];
    }
  __syncthreads();

  // Thread i: row i / 8, dims 8 (i % 8) .. + 7.
  const int row = threadIdx.x / 8, dim0 = 8 * (threadIdx.x % 8);
  const bool row_valid = row / kPerKv < count;
  float row_max = -INFINITY;
  for (int w = 0; w < kWarps; ++w) row_max = fmaxf(row_max, m_s[w * kRows + row]);
  float sum = 0.0f, out[8] = {};
  for (int w = 0; w < kWarps; ++w) {
    const float f = exp2f(m_s[w * kRows + row] - row_max);
    sum += l_s[w * kRows + row] * f;
    for (int d = 0; d < 8; ++d) out[d] += o_s[(w * kRows + row) * kMergeStride + dim0 + d] * f;
  }
  const int unit = group * p.kv_heads + kv_head;
  if (splits > 1) {
    float* part = scratch.partial + (static_cast<int64_t>(unit) * scratch.max_splits + split) * kRows * kPartialStride;
    if (row_valid) {
      float* dst = part + row * kPartialStride;
      if (dim0 == 0) {
        dst[0] = row_max;
        dst[1] = sum;
      }
      for (int d = 0; d < 8; ++d) dst[4 + dim0 + d] = out[d];
    }
    __threadfence();  // the partial is visible before the counter says so
    __syncthreads();
    if (threadIdx.x == 0) last_block = atomicAdd(&scratch.counters[unit], 1) == splits - 1;
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    if (threadIdx.x == 0) scratch.counters[unit] = 0;  // every split of the group has counted
    if (!row_valid) return;
    const float* first = scratch.partial + static_cast<int64_t>(unit) * scratch.max_splits * kRows * kPartialStride;
    row_max = -INFINITY;
    for (int s = 0; s < splits; ++s) row_max = fmaxf(row_max, __ldcg(first + (s * kRows + row) * kPartialStride));
    sum = 0.0f;
    for (int d = 0; d < 8; ++d) out[d] = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float* src = first + (s * kRows + row) * kPartialStride;
      const float f = exp2f(__ldcg(src) - row_max);
      sum += __ldcg(src + 1) * f;
      for (int d = 0; d < 8; ++d) out[d] += __ldcg(src + 4 + dim0 + d) * f;
    }
  }
  if (!row_valid) return;
  const int head = head_of(row);
  sum += exp2f(p.sinks[head] * kLog2e - row_max);
  const float factor = (kFp8 ? p.v_scale : 1.0f) / sum;
  uint4 packed;
  packed.x = pack_bf16x2(out[0] * factor, out[1] * factor);
  packed.y = pack_bf16x2(out[2] * factor, out[3] * factor);
  packed.z = pack_bf16x2(out[4] * factor, out[5] * factor);
  packed.w = pack_bf16x2(out[6] * factor, out[7] * factor);
  bf16* dst = static_cast<bf16*>(p.out) + (static_cast<int64_t>(token0 + row / kPerKv) * p.heads + head) * kHeadDim + dim0;
  *reinterpret_cast<uint4*>(dst) = packed;
}

template <typename KvElem, int kPerKv>
auto* kernel_for() {
  auto* kernel = attention_decode_kernel<KvElem, kPerKv>;
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), shared_bytes<KvElem>());
  return kernel;
}

// Calls f(kernel, shared bytes) with the kernel for (dtype, heads per KV head).
template <typename F>
void with_kernel(KvDtype dtype, int per_kv, F&& f) {
  auto typed = [&](auto elem) {
    using E = decltype(elem);
    switch (per_kv) {
      case 1: return f(kernel_for<E, 1>(), shared_bytes<E>());
      case 2: return f(kernel_for<E, 2>(), shared_bytes<E>());
      case 4: return f(kernel_for<E, 4>(), shared_bytes<E>());
      case 8: return f(kernel_for<E, 8>(), shared_bytes<E>());
      default: fail_cuda("attention_decode", "query heads per KV head must be 1, 2, 4 or 8", __FILE__, __LINE__);
    }
  };
  if (dtype == KvDtype::bf16)
    typed(bf16{});
  else if (dtype == KvDtype::fp8_e4m3)
    typed(fp8{});
  else
    fail_cuda("attention_decode", "the KV cache must be bf16 or fp8 (f32 takes attention_decode_f32)", __FILE__,
              __LINE__);
}

}  // namespace

int attention_decode_max_splits(KvDtype dtype, int heads_per_kv, int units, int multiprocessors) {
  int per_sm = 0;
  with_kernel(dtype, heads_per_kv, [&](auto* kernel, int bytes) {
    MOESERVE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, bytes));
  });
  const double slots = static_cast<double>(std::max(1, per_sm) * multiprocessors);
  // Blocks of one split take about equally long, so the last wave's fill is the GPU's use at the end.
  for (int s = 1; s <= kMaxSplits; ++s) {
    const double waves = std::max(1, units) * s / slots;
    if (waves / std::ceil(waves) >= 0.9) return s;
  }
  return kMaxSplits;
}

size_t attention_decode_partial_floats(int units, int max_splits) {
  return static_cast<size_t>(units) * max_splits * kRows * kPartialStride;
}

void launch_attention_decode(cudaStream_t stream, const AttentionParams& params, const StepView& step,
                             const DecodeScratch& scratch) {
  if (step.num_decode_groups == 0) return;
  if (params.head_dim != kHeadDim) fail_cuda("attention_decode", "head_dim must be 64", __FILE__, __LINE__);
  if (scratch.max_splits < 1 || scratch.max_splits > kMaxSplits)
    fail_cuda("attention_decode", "max_splits must be 1..32", __FILE__, __LINE__);
  const dim3 grid(step.num_decode_groups, params.kv_heads, scratch.max_splits);
  with_kernel(params.kv.dtype, params.heads / params.kv_heads, [&](auto* kernel, int bytes) {
    MOESERVE_CUDA_CHECK(cuda_launch(kernel, grid, kWarps * 32, bytes, stream, params, step, scratch));
  });
}

}  // namespace moeserve::cuda
