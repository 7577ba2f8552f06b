// MLA prefill in the expanded form (mla_prefill.h): the expansion of the context's latents through kv_b, then
// FlashAttention-2 over the expanded keys and values, both on mma.sync m16n8k16 with bf16 operands and fp32
// accumulators; at V3's widths the attention also has a version on wgmma (version 2, below; off until it has run on
// a GPU).
//
// Expansion: C [kv_rows, heads x (nope + v)] = A [kv_rows, L] x kv_b^T, A the latent rows gathered from the paged
// cache. Its own tiled kernel, not Blas::linear or fp8_block_linear: (1) A is not a matrix in memory but rows
// scattered over the pool's blocks (a gather pass would write and read it again); (2) for the checkpoint's e4m3
// kv_b, fp8_block_linear quantises the activations per 128 columns (act_quant), a 2^-4 rounding of every latent
// value, 16 times bf16's, that the absorbed decode (which reads the latent exactly) does not make, so the two forms
// would disagree on the same cache by more than the bf16 bound; here both operands are exact in bf16 (a bf16
// latent as stored, e4m3 values widened exactly; the fp8 cache's layer scale and the kv_b block scales applied in
// fp32, each 128-column block's products summed apart and promoted, as DeepSeek's fp8_gemm does); (3) Blas::linear
// (bf16 operands) writes fp32 where the attention wants bf16, twice the bytes of the largest buffer here. A block
// takes 64 context rows x 128 outputs (one 128-row scale block of kv_b: at V3's widths one head's K_nope or V) and
// walks the latent 32 values a stage, both operands staged through registers (so that e4m3 widens on the way)
// into double-buffered shared tiles read by ldmatrix; 8 warps of 32 x 32 outputs. Grid x runs over the row tiles,
// so the blocks in flight share one slab of kv_b (read from memory about once) and re-read the small latent tiles
// from L2.
// The k_pe of each row is copied as stored (bf16; e4m3 widened exactly, unscaled: the layer scale goes to q_pe).
//
// Attention: one block per (tile of 64 query rows of one sequence, head), 4 warps of 16 query rows. A warp holds
// its rows' queries as A fragments for the whole call ([q_nope ; rope(q_pe)] times scale * log2(e), q_pe also
// times the fp8 layer scale, rounded to bf16: 12 k16 slabs x 4 registers at V3's 192), walks the keys 0 .. the
// tile's last position 64 at a time (cp.async into double-buffered shared tiles: K rows of nope + rope, V rows of
// v_dim padded to 16 columns, each row 16 bytes longer than its values so that ldmatrix's 8 rows at one column hit
// 8 bank groups), computes S = Q K^T into 8 n8 tiles, masks keys past each row's position, and runs the online
// softmax of FlashAttention-2: m the running maximum in the log2 domain, o and l rescaled by 2^(m_old - m_new),
// p = 2^(s - m) rounded to bf16 straight from the score registers into the A fragments of O += P V (16 n8 tiles,
// 64 accumulators), l the sum of the rounded p (so the output is an exact average under the weights used).
// Key pairs past a warp's last position are skipped (all masked): the diagonal block costs half.
// Shared memory at V3's widths: 2 x 64 x (400 + 272) = 86,016 bytes: two blocks a multiprocessor.
// Registers (ptxas -v, CUDA 13.0, sm_90a; no spills in any instance): attention 195 (under 256 a thread: two
// blocks of 128 threads a multiprocessor, as the shared memory allows), most of them the 48 query fragment
// registers, 64 output accumulators and 32 scores; its 32-byte stack frame is cosf / sinf's slow path for large
// angles (gone with __cosf, which would not match the CPU). Expansion 71 (bf16 cache and kv_b) to 120 (fp8 kv_b:
// the per-block accumulators beside the promoted ones).
//
// Cost at V3's widths: expansion 2 x 512 x 32,768 = 33.6 MFLOP a context row; attention 2 x 128 x (192 + 128)
// = 82 kFLOP a (query, visible key) pair, against 2 x 128 x (576 + 512) = 279 kFLOP in the absorbed form. A prompt
// of n tokens with no cached context: 33.6 n M + 41 n^2 k against 139 n^2 k: the expanded form wins past n ~ 340
// before counting the absorbed form's absorption and un-absorption (2 x 2 x 128 x 128 x 512 = 33.6 MFLOP a query
// token, which the expanded form does not need): with them it wins at any length. With cached context (q_len
// query tokens over a context of C), the expanded form wins when (C - q_len) x 33.6 M < 197 k x the (query, key)
// pairs, q_len x (C - (q_len - 1) / 2): a decode token never, a chunk of 512 after 3,584 cached easily.
// Error against the CPU: q, K_nope, V and p rounded to bf16 (tests/runner/cuda/mla_prefill_test.cc derives the
// bound).
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/mla_decode.cuh"
#include "runner/cuda/mla_prefill.h"
#include "runner/cuda/sm90.cuh"

namespace moeserve::cuda {
namespace {

// ---- expansion ------------------------------------------------------------------------------------------------------
constexpr int kExpandThreads = 256;               // 8 warps: 2 along the rows x 4 along the outputs
constexpr int kExpandRows = kMlaPrefillTileRows;  // context rows a block
constexpr int kExpandCols = 128;                  // kv_b rows (outputs) a block
constexpr int kExpandK = 32;                      // latent values a stage
constexpr int kExpandLd = kExpandK + 8;           // bf16 a shared row: 80 bytes, 5 16-byte units (odd)
static_assert(kExpandCols == kFp8Block, "a block's outputs are one row of kv_b's 128 x 128 scale blocks");
static_assert(kExpandRows * kExpandK / 8 == kExpandThreads, "one 8-value piece of the latent tile a thread");
static_assert(kExpandCols * kExpandK / 8 == 2 * kExpandThreads, "two 8-value pieces of the kv_b tile a thread");

// 8 consecutive values as 8 bf16, exactly: bf16 as stored, e4m3 widened.
__device__ __forceinline__ uint4 load8_bf16(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint4 load8_bf16(const fp8* p) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  return make_uint4(e4m3x2_to_bf16x2(v.x), e4m3x2_to_bf16x2(v.x >> 16), e4m3x2_to_bf16x2(v.y),
                    e4m3x2_to_bf16x2(v.y >> 16));
}

// Context row r (0 .. kv_rows - 1) of the call in the latent cache: row r - kv_row0[i] of the last planned sequence
// i with kv_row0[i] <= r; -1 past the rows or where the table has no block.
__device__ int64_t context_row_offset(const MlaPrefillParams& p, const MlaPrefillWork& w, const StepView& step,
                                      int r) {
  if (r >= w.kv_rows) return -1;
  int lo = 0, hi = w.sequences - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (w.kv_row0[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return mla_position_offset(p.cache.shape, step_block_table(step, w.seq[lo], p.group), p.layer, r - w.kv_row0[lo]);
}

template <typename CacheElem, typename WeightElem>
__global__ void __launch_bounds__(kExpandThreads) mla_expand_kernel(MlaPrefillParams p, MlaPrefillWork w,
                                                                    StepView step) {
  pdl_prologue();
  constexpr bool kFp8Cache = sizeof(CacheElem) == 1, kFp8Weight = sizeof(WeightElem) == 1;
  __shared__ __align__(16) bf16 a_tile[2][kExpandRows][kExpandLd];
  __shared__ __align__(16) bf16 b_tile[2][kExpandCols][kExpandLd];
  __shared__ int64_t row_offset[kExpandRows];

  const MlaKvbView& kv_b = p.kv_b;
  const int L = kv_b.kv_lora_rank, R = p.cache.shape.rope_dim;
  const int64_t N = static_cast<int64_t>(kv_b.heads) * (kv_b.nope_dim + kv_b.v_dim);
  const int r0 = blockIdx.x * kExpandRows, n0 = blockIdx.y * kExpandCols;
  const CacheElem* cache = static_cast<const CacheElem*>(p.cache.base);
  const WeightElem* weights = static_cast<const WeightElem*>(kv_b.values);
  bf16* kv = static_cast<bf16*>(p.scratch);
  if (threadIdx.x < kExpandRows) row_offset[threadIdx.x] = context_row_offset(p, w, step, r0 + threadIdx.x);
  __syncthreads();

  if (blockIdx.y == 0) {  // the rows' k_pe, as stored
    bf16* k_pe = kv + static_cast<int64_t>(w.kv_rows) * N;
    for (int i = threadIdx.x; i < kExpandRows * (R / 8); i += kExpandThreads) {
      const int row = i / (R / 8), value = i % (R / 8) * 8;
      const int64_t offset = row_offset[row];
      if (r0 + row < w.kv_rows)
        *reinterpret_cast<uint4*>(k_pe + static_cast<int64_t>(r0 + row) * R + value) =
            offset >= 0 ? load8_bf16(cache + offset + L + value) : make_uint4(0, 0, 0, 0);
    }
  }

  // A thread stages the latent piece (row piece_row, values piece_k .. + 7 of the stage) and the kv_b pieces of
  // rows n0 + piece_row and n0 + piece_row + 64, zero past the rows, the outputs and L.
  const int piece_row = threadIdx.x / 4, piece_k = threadIdx.x % 4 * 8;
  uint4 a_next, b_next[2];
  auto load = [&](int k0) {
    const int k = k0 + piece_k;
    const int64_t offset = row_offset[piece_row];
    a_next = offset >= 0 && k < L ? load8_bf16(cache + offset + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t n = n0 + piece_row + 64 * i;
      b_next[i] = n < N && k < L ? load8_bf16(weights + n * L + k) : make_uint4(0, 0, 0, 0);
    }
  };
  auto store = [&](int stage) {
    *reinterpret_cast<uint4*>(&a_tile[stage][piece_row][piece_k]) = a_next;
#pragma unroll
    for (int i = 0; i < 2; ++i) *reinterpret_cast<uint4*>(&b_tile[stage][piece_row + 64 * i][piece_k]) = b_next[i];
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int wm = warp / 4 * 32, wn = warp % 4 * 32;  // the warp's outputs: rows wm .. + 31, columns wn .. + 31
  // Accumulator (mi, nt, e): row wm + 16 mi + g (+ 8 for e >= 2), column wn + 8 nt + 2c + (e % 2). An fp8 kv_b's
  // products go to `block` first, promoted into acc times the block's scale at the end of each 128 values.
  float acc[2][4][4] = {}, block[2][4][4] = {};
  float(&sum)[2][4][4] = kFp8Weight ? block : acc;
  const int k_tiles = (L + kExpandK - 1) / kExpandK;
  load(0);
  store(0);
  __syncthreads();
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int stage = kt % 2;
    if (kt + 1 < k_tiles) load((kt + 1) * kExpandK);
#pragma unroll
    for (int ks = 0; ks < kExpandK / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldmatrix_x4(a[mi], &a_tile[stage][wm + 16 * mi + lane % 16][16 * ks + lane / 16 * 8]);
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        uint32_t b[4];
        ldmatrix_x4(b, &b_tile[stage][wn + 16 * jj + lane / 16 * 8 + lane % 8][16 * ks + lane / 8 % 2 * 8]);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_bf16_16816(sum[mi][2 * jj], a[mi], b[0], b[1]);
          mma_bf16_16816(sum[mi][2 * jj + 1], a[mi], b[2], b[3]);
        }
      }
    }
    if constexpr (kFp8Weight) {
      const int k_end = (kt + 1) * kExpandK;
      if (k_end % kFp8Block == 0 || k_end >= L) {
        const float scale = kv_b.scales[n0 / kFp8Block * fp8_weight_scale_ld(L) + (k_end - 1) / kFp8Block];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[mi][nt][e] = fmaf(block[mi][nt][e], scale, acc[mi][nt][e]);
              block[mi][nt][e] = 0.0f;
            }
      }
    }
    if (kt + 1 < k_tiles) store((kt + 1) % 2);
    __syncthreads();  // stage kt read by every warp; stage kt + 1 written
  }

  const float out_scale = kFp8Cache ? p.kv_scale : 1.0f;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + wm + 16 * mi + g + 8 * r;
      if (row >= w.kv_rows) continue;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int64_t n = n0 + wn + 8 * nt + 2 * c;
        if (n < N)
          *reinterpret_cast<uint32_t*>(kv + row * N + n) =
              pack_bf16x2(acc[mi][nt][2 * r] * out_scale, acc[mi][nt][2 * r + 1] * out_scale);
      }
    }
}

// ---- attention ------------------------------------------------------------------------------------------------------
constexpr int kAttnWarps = kMlaPrefillTileRows / 16;  // a warp's m16 slab of query rows
constexpr int kAttnThreads = 32 * kAttnWarps;
constexpr int kKeyRows = 64;                 // keys a stage
constexpr int kKeyTiles = kKeyRows / 8;      // n8 tiles of the scores
constexpr int kKeyPairs = kKeyRows / 16;     // pairs of them: the k16 steps of P V
constexpr int kMaxQkSlabs = 192 / 16;        // k16 slabs of nope + rope (mla_prefill_shape_error)
constexpr int kMaxValueTiles = 128 / 8;      // n8 tiles of v_dim

struct AttnLayout {
  int qk_slabs, value_cols, key_bytes, value_bytes, stage_bytes;
};
__host__ __device__ inline AttnLayout attn_layout(int qk, int v_dim) {
  AttnLayout a;
  a.qk_slabs = qk / 16;
  a.value_cols = (v_dim + 15) / 16 * 16;
  a.key_bytes = 2 * qk + 16;
  a.value_bytes = 2 * a.value_cols + 16;
  a.stage_bytes = kKeyRows * (a.key_bytes + a.value_bytes);
  return a;
}

// A block's tile of query rows of one sequence (64: the work list's tile blockIdx.x; 128: version 3's pair of them),
// for one head (blockIdx.y), and this thread's place in it: its warp's first row, and the positions of its fragment
// rows g and g + 8.
struct AttnTile {
  int head, q_len, q_start, kv0;
  int start;       // position of query row 0
  int last;        // the tile's last position
  int key_blocks;  // key blocks 0 .. last
  int warp_row0;   // fragment rows g and g + 8: query rows warp_row0 + g (+ 8)
  int position[2];
};
__device__ __forceinline__ AttnTile attn_tile(const MlaPrefillWork& w, int s, int row0, int rows) {
  AttnTile t;
  t.head = blockIdx.y;
  t.q_len = w.q_len[s], t.q_start = w.q_start[s], t.kv0 = w.kv_row0[s];
  t.start = w.kv_row0[s + 1] - t.kv0 - t.q_len;
  t.last = t.start + min(row0 + rows, t.q_len) - 1;
  t.key_blocks = t.last / kKeyRows + 1;
  t.warp_row0 = row0 + 16 * static_cast<int>(threadIdx.x / 32);
  const int g = threadIdx.x % 32 / 4;
  t.position[0] = t.start + t.warp_row0 + g, t.position[1] = t.start + t.warp_row0 + g + 8;
  return t;
}
__device__ __forceinline__ AttnTile attn_tile(const MlaPrefillWork& w) {
  return attn_tile(w, w.tile_seq[blockIdx.x], w.tile_row0[blockIdx.x], kMlaPrefillTileRows);
}
// Version 3's block x: the x-th 128-row tile over the sequences in order (ceil(q_len / 128) each), as (sequence,
// first row); sequence -1 past the last (the launch has one block per 64-row tile, at least as many).
__device__ __forceinline__ int2 attn_pair_tile(const MlaPrefillWork& w, int x) {
  for (int s = 0; s < w.sequences; ++s) {
    const int pairs = (w.q_len[s] + 127) / 128;
    if (x < pairs) return make_int2(s, 128 * x);
    x -= pairs;
  }
  return make_int2(-1, 0);
}

// A warp's queries (tile t's) as A fragments of k slabs 0 .. slabs - 1: a0 / a2 row g's values 16 ks + 2c (+ 8), a1 /
// a3 row g + 8's ([q_nope ; rope(q_pe)] times scale * log2(e), q_pe also times the fp8 layer scale), the rope pairs
// (adjacent, as cpu::rope_adjacent_pairs) rotated at the row's position. Zero past q_len.
template <int kSlabs>
__device__ __forceinline__ void mla_query_fragments(const MlaPrefillParams& p, const AttnTile& t, int nope, int slabs,
                                                    uint32_t (&qf)[kSlabs][4]) {
  const int heads = p.kv_b.heads, qk = nope + p.cache.shape.rope_dim, g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  const float q_factor = p.scale * kLog2e;
  const float pe_factor = q_factor * (p.cache.dtype == KvDtype::fp8_e4m3 ? p.kv_scale : 1.0f);
#pragma unroll
  for (int ks = 0; ks < kSlabs; ++ks) {
    if (ks >= slabs) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e % 2, value = 16 * ks + 8 * (e / 2) + 2 * c, row = t.warp_row0 + g + 8 * r;
      float2 x = make_float2(0.0f, 0.0f);
      if (row < t.q_len) {
        x = *reinterpret_cast<const float2*>(p.q + (static_cast<int64_t>(t.q_start + row) * heads + t.head) * qk +
                                             value);
        if (value < nope) {
          x = make_float2(x.x * q_factor, x.y * q_factor);
        } else {
          const float angle = static_cast<float>(t.position[r]) * p.inv_freq[(value - nope) / 2];
          const float cs = cosf(angle) * p.rope_factor, sn = sinf(angle) * p.rope_factor;
          x = make_float2((x.x * cs - x.y * sn) * pe_factor, (x.y * cs + x.x * sn) * pe_factor);
        }
      }
      qf[ks][e] = pack_bf16x2(x.x, x.y);
    }
  }
}

// One key block of the online softmax (FlashAttention-2) over a warp's scores sc (n8 tile j, element e: key k0 +
// 8j + 2c + e % 2 of row g (e < 2) or g + 8): keys past a row's position masked, m the running maximum (log2
// domain), l rescaled and grown by the bf16-rounded p, P written as the A fragments of key step kk (keys 16 kk + 2c
// (+ 1) in a0 / a1, + 8 in a2 / a3); O (laid out as the scores, 16 n8 tiles of v columns) rescaled by the maximum's
// change.
__device__ __forceinline__ void mla_softmax_block(float (&sc)[kKeyTiles][4], int k0, const int (&position)[2],
                                                  float (&m)[2], float (&l)[2], float (&o)[kMaxValueTiles][4],
                                                  uint32_t (&pf)[kKeyPairs][4]) {
  const int c = threadIdx.x % 4;
  float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (k0 + 8 * j + 2 * c + e % 2 > position[e / 2]) sc[j][e] = -INFINITY;
      block_max[e / 2] = fmaxf(block_max[e / 2], sc[j][e]);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], quad_max(block_max[r]));
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with no visible key yet keeps o = l = 0
    const float rescale = exp2f(m[r] - base);
    m[r] = m_new;
    l[r] *= rescale;
#pragma unroll
    for (int nt = 0; nt < kMaxValueTiles; ++nt) {
      o[nt][2 * r] *= rescale;
      o[nt][2 * r + 1] *= rescale;
    }
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      const uint32_t word = pack_bf16x2(exp2f(sc[j][2 * r] - base), exp2f(sc[j][2 * r + 1] - base));
      pf[j / 2][2 * (j % 2) + r] = word;
      l[r] += bf16_low(word) + bf16_high(word);
    }
  }
}

// The two-stage copy pipeline of both attention kernels: key block b + 1's copies issued into the other stage (if
// any), then this thread's copies of block b waited for.
template <typename Load>
__device__ __forceinline__ void copy_ahead(int b, int key_blocks, Load&& load_keys) {
  if (b + 1 < key_blocks) {
    load_keys(b + 1, (b + 1) % 2);
    cp_async_commit();
    sm90::cp_async_wait_group<1>();
  } else {
    sm90::cp_async_wait_group<0>();
  }
}

// The warp's rows of O / l into p.out (rows past q_len skipped): o[nt][e] is column 8 nt + 2c + e % 2 of row g (e < 2)
// or g + 8; l the lane's partial sums.
template <typename Out>
__device__ __forceinline__ void mla_write_rows(const MlaPrefillParams& p, const AttnTile& t, int v_dim,
                                               const float (&o)[kMaxValueTiles][4], float (&l)[2]) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = quad_sum(l[r]);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = t.warp_row0 + g + 8 * r;
    if (row >= t.q_len) continue;
    const float inv = 1.0f / l[r];
    Out* out = static_cast<Out*>(p.out) + (static_cast<int64_t>(t.q_start + row) * p.kv_b.heads + t.head) * v_dim +
               2 * c;
#pragma unroll
    for (int nt = 0; nt < kMaxValueTiles; ++nt) {
      if (8 * nt >= v_dim) break;
      const float x = o[nt][2 * r] * inv, y = o[nt][2 * r + 1] * inv;
      if constexpr (sizeof(Out) == 2)
        *reinterpret_cast<uint32_t*>(out + 8 * nt) = pack_bf16x2(x, y);
      else
        *reinterpret_cast<float2*>(out + 8 * nt) = make_float2(x, y);
    }
  }
}

template <typename Out>
__global__ void __launch_bounds__(kAttnThreads) mla_prefill_attention_kernel(MlaPrefillParams p, MlaPrefillWork w) {
  pdl_prologue();
  extern __shared__ __align__(16) uint8_t smem[];
  const MlaKvbView& kv_b = p.kv_b;
  const int heads = kv_b.heads, nope = kv_b.nope_dim, v_dim = kv_b.v_dim, R = p.cache.shape.rope_dim;
  const int qk = nope + R;
  const AttnLayout layout = attn_layout(qk, v_dim);
  const int64_t N = static_cast<int64_t>(heads) * (nope + v_dim);
  const bf16* kv = static_cast<const bf16*>(p.scratch);
  const bf16* k_pe = kv + static_cast<int64_t>(w.kv_rows) * N;

  const AttnTile t = attn_tile(w);
  const int head = t.head, q_len = t.q_len, kv0 = t.kv0, last = t.last, key_blocks = t.key_blocks;
  const int lane = threadIdx.x % 32;
  const bool warp_active = t.warp_row0 < q_len;
  const int warp_last = t.start + min(t.warp_row0 + 16, q_len) - 1;

  // V's pad columns (v_dim .. value_cols) stay zero in both stages: the copies never write them.
  const int pad_pieces = (layout.value_cols - v_dim) / 8;
  for (int i = threadIdx.x; i < 2 * kKeyRows * pad_pieces; i += kAttnThreads) {
    const int stage = i / (kKeyRows * pad_pieces), key = i / pad_pieces % kKeyRows, piece = i % pad_pieces;
    uint8_t* values = smem + stage * layout.stage_bytes + kKeyRows * layout.key_bytes;
    *reinterpret_cast<uint4*>(values + key * layout.value_bytes + 2 * v_dim + 16 * piece) = make_uint4(0, 0, 0, 0);
  }

  // Key block b's K rows [K_nope ; k_pe] and V rows into stage `stage`, zero past the tile's last position.
  auto load_keys = [&](int b, int stage) {
    uint8_t* keys = smem + stage * layout.stage_bytes;
    uint8_t* values = keys + kKeyRows * layout.key_bytes;
    const int nope_pieces = nope / 8, key_pieces = qk / 8, pieces = key_pieces + v_dim / 8;
    for (int i = threadIdx.x; i < kKeyRows * pieces; i += kAttnThreads) {
      const int key = i / pieces, piece = i % pieces, key_position = b * kKeyRows + key;
      const bool valid = key_position <= last;
      const int64_t row = kv0 + (valid ? key_position : 0);
      const bf16* head_row = kv + row * N + static_cast<int64_t>(head) * (nope + v_dim);
      if (piece < nope_pieces)
        cp_async_16(keys + key * layout.key_bytes + 16 * piece, head_row + 8 * piece, valid);
      else if (piece < key_pieces)
        cp_async_16(keys + key * layout.key_bytes + 16 * piece, k_pe + row * R + 8 * (piece - nope_pieces), valid);
      else
        cp_async_16(values + key * layout.value_bytes + 16 * (piece - key_pieces),
                    head_row + nope + 8 * (piece - key_pieces), valid);
    }
  };
  load_keys(0, 0);
  cp_async_commit();

  uint32_t qf[kMaxQkSlabs][4];
  mla_query_fragments(p, t, nope, layout.qk_slabs, qf);

  // Output accumulator (nt, e): column 8 nt + 2c + (e % 2) of row g (e < 2) or g + 8.
  float o[kMaxValueTiles][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int b = 0; b < key_blocks; ++b) {
    copy_ahead(b, key_blocks, load_keys);
    __syncthreads();  // block b's rows, every thread's pieces
    const int k0 = b * kKeyRows;
    if (warp_active && k0 <= warp_last) {
      const uint8_t* keys = smem + (b % 2) * layout.stage_bytes;
      const uint8_t* values = keys + kKeyRows * layout.key_bytes;
      const int key_pairs = min(kKeyPairs, (warp_last - k0) / 16 + 1);  // later pairs are past every row: masked
      // S = Q K^T: lanes 0-7 / 8-15 address keys 0-7 of a pair at values + 0 / + 8, lanes 16-31 keys 8-15.
      float sc[kKeyTiles][4] = {};
      const uint8_t* key_row = keys + (lane / 16 * 8 + lane % 8) * layout.key_bytes + lane / 8 % 2 * 16;
#pragma unroll
      for (int ks = 0; ks < kMaxQkSlabs; ++ks) {
        if (ks >= layout.qk_slabs) break;
#pragma unroll
        for (int jj = 0; jj < kKeyPairs; ++jj) {
          if (jj >= key_pairs) break;
          uint32_t kf[4];
          ldmatrix_x4(kf, key_row + 16 * jj * layout.key_bytes + 32 * ks);
          mma_bf16_16816(sc[2 * jj], qf[ks], kf[0], kf[1]);
          mma_bf16_16816(sc[2 * jj + 1], qf[ks], kf[2], kf[3]);
        }
      }
      // Causal mask, then the online softmax.
      uint32_t pf[kKeyPairs][4];
      mla_softmax_block(sc, k0, t.position, m, l, o, pf);
      // O += P V: lanes 0-15 address keys 16 kk + 0..15 at a 16-byte column, lanes 16-31 the next column: b0, b1
      // of n tile 2q, then of 2q + 1 (ldmatrix.trans: V's keys are K, its columns N).
      const uint8_t* value_row = values + (lane % 16) * layout.value_bytes + lane / 16 * 16;
#pragma unroll
      for (int kk = 0; kk < kKeyPairs; ++kk) {
        if (kk >= key_pairs) break;
#pragma unroll
        for (int q = 0; q < kMaxValueTiles / 2; ++q) {
          if (16 * q >= layout.value_cols) break;
          uint32_t vf[4];
          ldmatrix_x4_trans(vf, value_row + 16 * kk * layout.value_bytes + 32 * q);
          mma_bf16_16816(o[2 * q], pf[kk], vf[0], vf[1]);
          mma_bf16_16816(o[2 * q + 1], pf[kk], vf[2], vf[3]);
        }
      }
    }
    __syncthreads();  // stage b % 2 read by every warp before block b + 2's copies land in it
  }
  if (!warp_active) return;

  mla_write_rows<Out>(p, t, v_dim, o, l);
}

// ---- attention, version 2: wgmma (V3's widths) ------------------------------------------------------------------
// The same blocks, warps, query fragments, masks and online softmax as version 1, with the products on wgmma:
// a block's 4 warps are one warpgroup of 64 query rows, S = Q K^T as 12 wgmma m64n64k16 (Q's register A
// fragments, K K-major in shared memory) and O += P V as 4 x 2 wgmma m64n64k16 (P's register A fragments, each
// 64-column half of V MN-major), so no B fragment goes through registers (version 1 loaded each by ldmatrix: 80
// ldmatrix.x4 for 160 mma.sync a warp a stage). The stages hold the 64 keys' rows in the 128-byte swizzle wgmma
// reads: K as three 64-dim sub-tiles (nope 0-63, nope 64-127, rope), V as two; each sub-tile 64 rows of 128 bytes,
// 1024-byte aligned. Every warp runs every key block up to the block's last position (a warpgroup's wgmma cannot
// skip per warp; rows past their position are masked as in version 1). Copies: cp.async by all 128 threads, two
// stages, as version 1; each thread fences its landed copies to the async proxy before the barrier that publishes
// the stage (sm90.cuh). Only nope 128, rope 64, v 128 (mla_prefill_v2_fits); other widths take version 1.
// Version 3 is the same kernel with two warpgroups: a block takes 128 query rows (a pair of the work list's tiles of
// one sequence), each warpgroup 64 of them, both reading every stage: half version 2's K / V bytes from L2 a FLOP
// (40 KB a key block for 5.2 MFLOP, not 2.6), which bounds version 2 near ~350 TFLOP/s at ~5.5 TB/s of L2 (counted,
// not measured), and one warpgroup's softmax runs while the other's wgmmas do. 256 threads at 182 registers: one
// block an SM. A warpgroup whose rows all lie before a key block computes it fully masked (no wgmma may be skipped
// per warpgroup without ptxas serialising them).
constexpr int kV2SubTile = kKeyRows * 128;         // 64 rows of 64 bf16 values
constexpr int kV2StageBytes = 5 * kV2SubTile;      // K: 3 sub-tiles, V: 2
constexpr int kV2SharedBytes = 1024 + 2 * kV2StageBytes;

template <typename Out, int kGroups>
__global__ void __launch_bounds__(kAttnThreads* kGroups, 3 - kGroups)
    mla_prefill_attention_v2_kernel(MlaPrefillParams p, MlaPrefillWork w) {
  constexpr int kNope = 128, kRope = 64, kQk = kNope + kRope, kV = 128, kSlabs = kQk / 16;
  constexpr int kThreads = kAttnThreads * kGroups;
  pdl_prologue();
  int2 pair = make_int2(0, 0);
  if constexpr (kGroups == 2) {
    pair = attn_pair_tile(w, static_cast<int>(blockIdx.x));
    if (pair.x < 0) return;  // past the last 128-row tile: the whole block
  }
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int heads = p.kv_b.heads;
  const int64_t N = static_cast<int64_t>(heads) * (kNope + kV);
  const bf16* kv = static_cast<const bf16*>(p.scratch);
  const bf16* k_pe = kv + static_cast<int64_t>(w.kv_rows) * N;

  const AttnTile t = kGroups == 1 ? attn_tile(w) : attn_tile(w, pair.x, pair.y, 128);
  const int head = t.head, kv0 = t.kv0, last = t.last, key_blocks = t.key_blocks;

  // Key block b's rows into stage `stage`: 40 16-byte chunks a key (K nope 16, k_pe 8, V 16), zero past `last`.
  auto load_keys = [&](int b, int stage) {
    uint8_t* base = smem + stage * kV2StageBytes;
    for (int i = threadIdx.x; i < kKeyRows * 40; i += kThreads) {
      const int key = i / 40, piece = i % 40, key_position = b * kKeyRows + key;
      const bool valid = key_position <= last;
      const int64_t row = kv0 + (valid ? key_position : 0);
      const bf16* head_row = kv + row * N + static_cast<int64_t>(head) * (kNope + kV);
      const bf16* source;
      int sub, chunk;
      if (piece < 16) {
        source = head_row + 8 * piece, sub = piece / 8, chunk = piece % 8;
      } else if (piece < 24) {
        source = k_pe + row * kRope + 8 * (piece - 16), sub = 2, chunk = piece - 16;
      } else {
        source = head_row + kNope + 8 * (piece - 24), sub = 3 + (piece - 24) / 8, chunk = (piece - 24) % 8;
      }
      cp_async_16(base + sub * kV2SubTile + key * 128 + ((chunk ^ (key & 7)) << 4), source, valid);
    }
  };
  load_keys(0, 0);
  cp_async_commit();

  // Q as version 1 builds it.
  uint32_t qf[kSlabs][4];
  mla_query_fragments(p, t, kNope, kSlabs, qf);

  // O as version 1's; tiles 0-7 and 8-15 are the two 64-column halves wgmma accumulates.
  float o[kMaxValueTiles][4] = {};
  float(&o_half0)[32] = reinterpret_cast<float(&)[32]>(o[0]);
  float(&o_half1)[32] = reinterpret_cast<float(&)[32]>(o[8]);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float sc[kKeyTiles][4] = {};  // S of the key block, as version 1's
  float(&s32)[32] = reinterpret_cast<float(&)[32]>(sc);  // the same registers as wgmma's accumulator list
  const uint32_t stages = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  for (int b = 0; b < key_blocks; ++b) {
    copy_ahead(b, key_blocks, load_keys);
    sm90::fence_proxy_async_shared();  // this thread's landed copies, before the barrier publishes them to wgmma
    __syncthreads();
    const int k0 = b * kKeyRows;
    const uint32_t stage = stages + (b % 2) * kV2StageBytes;
    // S = Q K^T: slab ks is 16 dims of sub-tile ks / 4, 32 bytes along its rows per slab.
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kSlabs; ++ks)
      sm90::wgmma_m64n64k16(s32, qf[ks], sm90::sw128_descriptor(stage + (ks / 4) * kV2SubTile + 32 * (ks % 4), 1024),
                            ks > 0 ? 1u : 0u);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(s32);
    // Causal mask and the online softmax, as version 1.
    uint32_t pf[kKeyPairs][4];
    mla_softmax_block(sc, k0, t.position, m, l, o, pf);
    // O += P V: slab kk is keys 16 kk .. 16 kk + 15, 2048 bytes into each V half.
    sm90::fence_registers(o_half0);
    sm90::fence_registers(o_half1);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeyPairs; ++kk) {
      const uint32_t v_slab = stage + 3 * kV2SubTile + 2048 * kk;
      sm90::wgmma_m64n64k16_mn_major_b(o_half0, pf[kk], sm90::sw128_descriptor(v_slab, 1024));
      sm90::wgmma_m64n64k16_mn_major_b(o_half1, pf[kk], sm90::sw128_descriptor(v_slab + kV2SubTile, 1024));
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(o_half0);
    sm90::fence_registers(o_half1);
#pragma unroll
    for (int kk = 0; kk < kKeyPairs; ++kk) sm90::fence_registers(pf[kk]);
    __syncthreads();  // stage b % 2 read by every wgmma before block b + 2's copies land in it
  }

  mla_write_rows<Out>(p, t, kV, o, l);
}

// ---- launchers ------------------------------------------------------------------------------------------------------
template <typename CacheElem, typename WeightElem>
void launch_expand(cudaStream_t stream, const MlaPrefillParams& p, const MlaPrefillWork& w, const StepView& step) {
  const int64_t N = static_cast<int64_t>(p.kv_b.heads) * (p.kv_b.nope_dim + p.kv_b.v_dim);
  const dim3 grid((w.kv_rows + kExpandRows - 1) / kExpandRows,
                  static_cast<unsigned>((N + kExpandCols - 1) / kExpandCols));
  MOESERVE_CUDA_CHECK(
      cuda_launch(mla_expand_kernel<CacheElem, WeightElem>, grid, kExpandThreads, 0, stream, p, w, step));
}

template <typename CacheElem>
void launch_expand_cache(cudaStream_t stream, const MlaPrefillParams& p, const MlaPrefillWork& w,
                         const StepView& step) {
  if (p.kv_b.type == MlaWeightType::fp8_block)
    launch_expand<CacheElem, fp8>(stream, p, w, step);
  else
    launch_expand<CacheElem, bf16>(stream, p, w, step);
}

template <typename Out, int kGroups>
void launch_attention_v2(cudaStream_t stream, const MlaPrefillParams& p, const MlaPrefillWork& w) {
  const auto kernel = mla_prefill_attention_v2_kernel<Out, kGroups>;
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kV2SharedBytes);
  MOESERVE_CUDA_CHECK(
      cuda_launch(kernel, dim3(w.tiles, p.kv_b.heads), kAttnThreads * kGroups, kV2SharedBytes, stream, p, w));
}

template <typename Out>
void launch_attention(cudaStream_t stream, const MlaPrefillParams& p, const MlaPrefillWork& w) {
  const int bytes = 2 * attn_layout(p.kv_b.nope_dim + p.cache.shape.rope_dim, p.kv_b.v_dim).stage_bytes;
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(&mla_prefill_attention_kernel<Out>), bytes);
  MOESERVE_CUDA_CHECK(cuda_launch(mla_prefill_attention_kernel<Out>, dim3(w.tiles, p.kv_b.heads), kAttnThreads, bytes,
                                  stream, p, w));
}

}  // namespace

void launch_mla_prefill_expand(cudaStream_t stream, const MlaPrefillParams& params, const MlaPrefillWork& work,
                               const StepView& step) {
  const std::string error = mla_prefill_shape_error(params.kv_b, params.cache);
  if (!error.empty()) fail_cuda("mla_prefill", error.c_str(), __FILE__, __LINE__);
  if (params.kv_b.type == MlaWeightType::fp8_block && params.kv_b.scales == nullptr)
    fail_cuda("mla_prefill", "an fp8 kv_b needs its block scales", __FILE__, __LINE__);
  if (work.tiles == 0) return;
  if (params.cache.dtype == KvDtype::fp8_e4m3)
    launch_expand_cache<fp8>(stream, params, work, step);
  else
    launch_expand_cache<bf16>(stream, params, work, step);
}

bool mla_prefill_v2_fits(const MlaKvbView& kv_b, int rope_dim) {
  return kv_b.nope_dim == 128 && rope_dim == 64 && kv_b.v_dim == 128;
}

int mla_prefill_attention_version(const MlaPrefillParams& params) {
  if (!mla_prefill_v2_fits(params.kv_b, params.cache.shape.rope_dim)) return 1;
  int asked = params.attention_version;
  if (asked == 0) {
    const char* value = std::getenv("MOESERVE_MLA_PREFILL_ATTENTION");
    const std::string_view v = value != nullptr ? value : "";
    asked = v == "v2" ? 2 : v == "v3" ? 3 : kMlaPrefillAttentionDefault;
  }
  return asked == 2 || asked == 3 ? asked : 1;
}

void launch_mla_prefill_attention(cudaStream_t stream, const MlaPrefillParams& params, const MlaPrefillWork& work) {
  if (work.tiles == 0) return;
  const int version = mla_prefill_attention_version(params);
  const bool bf16_out = params.out_type == Precision::bf16;
  if (version == 3)
    bf16_out ? launch_attention_v2<bf16, 2>(stream, params, work) : launch_attention_v2<float, 2>(stream, params, work);
  else if (version == 2)
    bf16_out ? launch_attention_v2<bf16, 1>(stream, params, work) : launch_attention_v2<float, 1>(stream, params, work);
  else
    bf16_out ? launch_attention<bf16>(stream, params, work) : launch_attention<float>(stream, params, work);
}

void launch_mla_prefill(cudaStream_t stream, const MlaPrefillParams& params, const MlaPrefillWork& work,
                        const StepView& step) {
  launch_mla_prefill_expand(stream, params, work, step);
  launch_mla_prefill_attention(stream, params, work);
}

}  // namespace moeserve::cuda
