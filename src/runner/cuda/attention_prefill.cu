// Prefill attention over the paged KV cache (so earlier chunks' keys are seen) on Hopper tensor cores, with sinks,
// sliding windows and tree masks, in the manner of FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608):
// warp-specialised producer and consumers over an mbarrier pipeline, wgmma with K and V in shared memory, the
// online softmax of one key tile overlapped with the tensor cores' P V product of the previous one.
// Version 2. Version 1 (mma.sync, one query head per 64-row block, single-buffered tiles) is
// benchmarks/cuda/attention_prefill_v1.cu, timed beside this one by attention_bench. Since 2026-12-06 the two
// consumer warpgroups take turns at the tensor cores (FA3's ping-pong, named barriers 1 and 2), both run the
// block's whole tile range, the row maxima and sums keep four partials, and the producer finds a row's address from
// one table entry when blocks hold 16 keys: the producer's ~690 instructions a tile had been what the consumers
// waited for (ncu: 20% of warp samples at the full barrier); 261 -> 419 TFLOP/s on an H100 (docs/PERF.md).
//
// Work: a unit is up to kCtaTokens consecutive query tokens of one sequence (its share of a 64-token query
// tile, step.q_tile_*) for one KV head; a block runs one unit, or (sliding layers; `blocks` of the launch) several
// in turn with its pipeline running on across them: a unit of a 128-key window is two key tiles, and one unit a
// block spent most of the block's life filling and draining its pipeline (11% of the bf16 rate, 209 us a layer
// of an 8k prompt on an H100, against 45 us of bytes). GQA packs (token, query head) pairs into wgmma's M: a consumer
// warpgroup's 64 rows are 64 / G tokens x the G query heads of the KV head (gpt-oss: 8 tokens x 8 heads), row
// r = (token r / G, head r % G), so each K and V tile is read once for all of them. Blocks start heaviest first
// (the last tiles of a causal prompt see the most keys).
// Threads: warpgroup 0 produces, warpgroups 1 and 2 consume; setmaxnreg moves the producer's registers to them.
// Pipeline: the block's keys [key_lo, key_hi] (its first token's window start, its last token's slot) in tiles
// of 128, through kStages shared-memory stages (a K and a V tile: 128 rows of 128 bytes in the 128-byte swizzle
// wgmma reads), each with a `full` mbarrier (the producer's 4 warps arrive) and an `empty` one (the consumers'
// 8 warps arrive). Rows are found through the block table one by one (any block size) and zero-filled outside
// [key_lo, key_hi] or in blocks given back, so masked keys meet zeros, never stale NaNs. Every copy is a 16-byte
// cp.async whose completion the issuing thread waits for one tile later (two tiles in flight), then fences to the
// async proxy (wgmma reads through it) before its warp announces the tile.
//   bf16 KV: copied straight into the stage.
//   fp8 KV:  copied into a staging buffer as stored, then converted by the same thread to fp16 (exact, one
//            instruction a pair: kv_dtype.cuh; bf16 took four) into the stage, and the products run in fp16: Q
//            rounded to fp16 once (exact for magnitudes in [2^-14, 65504], finer than bf16 inside it; saturated
//            beyond), P in fp16 (values in [0, 1]). The layer's k_scale joins the score scale and v_scale the
//            output.
// Consumer warpgroup, for each tile t of its own range (the others are waited for and released untouched):
//   S = Q K_t^T     4 x wgmma m64n128k16, Q as register A fragments, K K-major (row = key);
//   O += P V_{t-1}  8 x wgmma m64n64k16, P as register A fragments, V MN-major (the descriptor transposes it),
//                   issued right after S, so the softmax of tile t runs while the tensor cores finish P V_{t-1};
//   masks only where a tile crosses a row's causal or window edge (or holds a tree step's keys); scale folded
//   into one FMA before ex2 (log2 domain); online softmax whose running max starts at the sink;
//   once P V_{t-1} is done: release its stage, rescale O by the max's change, P = bf16(S).
// End: o = O / (l + 2^(sink - m)). Tree steps: a row's keys run to its own slot, its window starts from its
// position (start + depth), and the step's keys must pass its tree mask.
// head_dim must be 64; G = 1, 2, 4 or 8. CPU reference: cpu::attend_one_head per (token, head).
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "model/fp8_blocks.h"
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/sm90.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kHeadDim = kAttentionHeadDim;
constexpr int kWgRows = 64;     // wgmma's M: (token, query head) rows of one consumer warpgroup
constexpr int kConsumers = 2;   // consumer warpgroups
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kTileKeys = 128;  // N of S = Q K^T, K of O += P V
constexpr int kStages = 4;      // the producer keeps two tiles in flight while the consumers hold two
constexpr int kRowBytes = kHeadDim * 2;  // a bf16 row: one 128-byte swizzle row
constexpr int kTileBytes = kTileKeys * kRowBytes;
constexpr int kStageBytes = 2 * kTileBytes;  // K tile, then V tile
constexpr int kStagingBytes = kTileKeys * kHeadDim * 2;  // fp8 KV: one tile's K and V rows as stored (e4m3)

// Shared memory: 1024 bytes of room to align the stages (the swizzle repeats every 1024 bytes), the stages, fp8's
// two staging buffers, the barriers.
template <typename KvElem>
constexpr int shared_bytes() {
  return 1024 + kStages * kStageBytes + (sizeof(KvElem) == 1 ? 2 * kStagingBytes : 0) + 2 * kStages * 8;
}

// Registers per thread after the role split: the producer only issues copies (and converts one piece at a time),
// the consumers hold S (64), O (32), P (32), Q (16) and the softmax state. The SM's 64K registers hold one block.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
static_assert(128 * kProducerRegisters + 128 * kConsumers * kConsumerRegisters <= 65536);

// One block's work.
struct Block {
  int seq = 0, kv_head = 0, q_start = 0, start = 0;  // start: KV slot of the sequence's first token of the step
  int t0 = 0, t1 = 0;                                // tokens [t0, t1) of the sequence in the step
  int key_lo = 0, key_hi = 0, tiles = 0;             // keys [key_lo, key_hi] in `tiles` tiles from key_lo
};

__device__ __forceinline__ int window_start(int window, int position) {
  return window > 0 ? max(0, position - window + 1) : 0;
}

// The lowest position of tokens [t0, t1) of a tree step's sequence (a causal one's tokens sit at their slots, a
// tree's at start + depth), which bounds their windows from below; sliding layers only (full ones start at 0).
__device__ __forceinline__ int lowest_position(const AttentionParams& p, const StepView& step, const Block& b, int t0,
                                               int t1) {
  int lowest = b.start + t0;
  for (int t = t0; t < t1 && p.window > 0; ++t) lowest = min(lowest, step.positions[b.q_start + t]);
  return lowest;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile (128-byte swizzle: chunk ^ row % 8).
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// K element offsets of a thread's rows row0 + kStep * i of tile t (-1: zero-fill), walking the block table once
// per tile (one division) rather than per row.
template <int kRows, int kStep>
__device__ __forceinline__ void row_offsets(const AttentionParams& p, const Block& b, const int32_t* table, int t,
                                            int row0, int64_t (&offset)[kRows]) {
  int key = b.key_lo + t * kTileKeys + row0;
  int logical = key / p.kv.block_size, row = key % p.kv.block_size;
#pragma unroll
  for (int i = 0; i < kRows; ++i, key += kStep) {
    const int32_t block = key <= b.key_hi ? table[logical] : -1;
    offset[i] = block >= 0 ? kv_block_offset(p.kv, block, p.slot, 0, b.kv_head, row) : -1;
    for (row += kStep; row >= p.kv.block_size; row -= p.kv.block_size) ++logical;
  }
}

// Warpgroup 0: fills stage g % kStages with tile t (g = base + t) once the consumers have released the pipeline's tile
// g - kStages (fp8: through staging buffer g % 2, each thread converting the pieces it copied itself).
// `base`: the tiles this block's earlier units ran, so tile t is the pipeline's tile base + t (its stage and phase).
template <typename KvElem>
__device__ __forceinline__ void produce(const AttentionParams& p, const StepView& step, const Block& b, int base,
                                        uint8_t* tiles, uint8_t* staging, uint64_t* full, uint64_t* empty) {
  constexpr bool kFp8 = sizeof(KvElem) == 1;
  // Thread: one 16-byte piece of rows row0 + kStep * i (bf16: 8 pieces a row, a warp copies 4 whole rows; fp8:
  // 4 pieces, 16 dims each), of K and of V.
  constexpr int kPieces = kHeadDim * static_cast<int>(sizeof(KvElem)) / 16;
  constexpr int kStep = 128 / kPieces, kRows = kTileKeys / kStep;
  const int thread = threadIdx.x, lane = thread % 32, piece = thread % kPieces, row0 = thread / kPieces;
  const uint8_t* cache = static_cast<const uint8_t*>(p.kv.base);
  const int64_t v_minus_k = static_cast<int64_t>(p.kv.kv_heads) * p.kv.block_size * kHeadDim * sizeof(KvElem);
  const int32_t* table = step_block_table(step, b.seq, p.group);
  auto acquire = [&](int t) {
    t += base;
    if (t >= kStages) sm90::mbarrier_wait(&empty[t % kStages], (t / kStages + 1) & 1);
  };
  // Blocks of 16 keys (the engine's): a thread's rows, kStep keys apart, sit at the same row of every (kStep / 16)-th
  // block, so a row's address is one table entry times the block's bytes plus a base fixed for the whole block
  // (~10 instructions a row; the general walk below costs ~40, and the producer's instructions were what the
  // consumers waited for).
  static_assert(kStep % 16 == 0);
  const int first_key = b.key_lo + row0;
  const int64_t block_bytes = kv_block_offset(p.kv, 1, 0, 0, 0, 0) * static_cast<int64_t>(sizeof(KvElem));
  const bool block16 = p.kv.block_size == 16 && block_bytes <= 0xffffffffll;
  const uint8_t* row_base =
      cache + kv_block_offset(p.kv, 0, p.slot, 0, b.kv_head, first_key % 16) * static_cast<int64_t>(sizeof(KvElem)) +
      16 * piece;
  auto issue = [&](int t) {
    const int g = base + t;
    uint8_t* k_dst = kFp8 ? staging + (g % 2) * kStagingBytes : tiles + (g % kStages) * kStageBytes;
    uint8_t* v_dst = k_dst + (kFp8 ? kStagingBytes / 2 : kTileBytes);
    if (block16) {
      int32_t block[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int key = first_key + t * kTileKeys + kStep * i;
        block[i] = key <= b.key_hi ? table[key / 16] : -1;
      }
      if (!kFp8) acquire(t);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int row = row0 + kStep * i;
        const bool ok = block[i] >= 0;
        const uint8_t* k = ok ? row_base + static_cast<uint64_t>(static_cast<uint32_t>(block[i])) *
                                               static_cast<uint32_t>(block_bytes)
                              : cache;
        const uint32_t at = kFp8 ? row * (kHeadDim * sizeof(KvElem)) + 16 * piece : swizzled(row, piece);
        cp_async_16(k_dst + at, k, ok);
        cp_async_16(v_dst + at, ok ? k + v_minus_k : cache, ok);
      }
      cp_async_commit();
      return;
    }
    int64_t offset[kRows];
    row_offsets<kRows, kStep>(p, b, table, t, row0, offset);
    if (!kFp8) acquire(t);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = row0 + kStep * i;
      const bool ok = offset[i] >= 0;
      const uint8_t* k = cache + (ok ? offset[i] * static_cast<int64_t>(sizeof(KvElem)) + 16 * piece : 0);
      const uint32_t at = kFp8 ? row * (kHeadDim * sizeof(KvElem)) + 16 * piece : swizzled(row, piece);
      cp_async_16(k_dst + at, k, ok);
      cp_async_16(v_dst + at, ok ? k + v_minus_k : cache, ok);
    }
    cp_async_commit();
  };
  // This thread's copies of tile t have landed: (fp8: convert them into the stage,) make them visible to wgmma,
  // then the warp's lane 0 arrives.
  auto finish = [&](int t) {
    if constexpr (kFp8) {
      acquire(t);
      const uint8_t* k_src = staging + ((base + t) % 2) * kStagingBytes;
      uint8_t* stage = tiles + ((base + t) % kStages) * kStageBytes;
#pragma unroll
      for (int i = 0; i < 2 * kRows; ++i) {
        const int row = row0 + kStep * (i % kRows), which = i / kRows;
        const uint4 v = *reinterpret_cast<const uint4*>(k_src + which * (kStagingBytes / 2) + row * kHeadDim + 16 * piece);
        uint8_t* tile = stage + which * kTileBytes;
        *reinterpret_cast<uint4*>(tile + swizzled(row, 2 * piece)) =
            make_uint4(e4m3x2_to_f16x2(v.x), e4m3x2_to_f16x2(v.x >> 16), e4m3x2_to_f16x2(v.y),
                       e4m3x2_to_f16x2(v.y >> 16));
        *reinterpret_cast<uint4*>(tile + swizzled(row, 2 * piece + 1)) =
            make_uint4(e4m3x2_to_f16x2(v.z), e4m3x2_to_f16x2(v.z >> 16), e4m3x2_to_f16x2(v.w),
                       e4m3x2_to_f16x2(v.w >> 16));
      }
    }
    sm90::fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) sm90::mbarrier_arrive(&full[(base + t) % kStages]);
  };
  for (int t = 0; t < b.tiles; ++t) {
    issue(t);
    if (t > 0) {
      sm90::cp_async_wait_group<1>();  // tile t - 1's copies
      finish(t - 1);
    }
  }
  cp_async_wait_all();
  finish(b.tiles - 1);
}

// What one of a thread's two rows sees: keys lo..last, those of the step passing the tree mask.
struct RowKeys {
  int lo = 0, last = 0;
  uint64_t mask = ~0ull;
};

// A consumer warpgroup's softmax over tile S (raw scores) in place: masked where `masked`, then S = 2^(S c - m)
// with the running max m and sum l updated and alpha = 2^(m_old - m_new) per row.
template <bool kTree>
__device__ __forceinline__ void online_softmax(float (&s)[64], bool masked, int key0, int c, int start,
                                               const RowKeys (&rows)[2], float qk_scale, float (&m)[2], float (&l)[2],
                                               float (&alpha)[2]) {
  if (masked) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const RowKeys& r = rows[e / 2];
        const int key = key0 + 8 * j + 2 * c + e % 2;
        const bool seen = key >= r.lo && key <= r.last && (!kTree || tree_visible(r.mask, key, start));
        s[4 * j + e] = seen ? s[4 * j + e] : -INFINITY;
      }
  }
  // Row maxima and sums in four independent partials a row (a chain of 32 dependent operations otherwise).
  float part_max[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) part_max[i][k] = -INFINITY;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i) part_max[i][j % 4] = fmaxf(part_max[i][j % 4], fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
  float m_scaled[2], sum[2][4] = {};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float tile_max = fmaxf(fmaxf(part_max[i][0], part_max[i][1]), fmaxf(part_max[i][2], part_max[i][3]));
    const float m_new = fmaxf(m[i], quad_max(tile_max) * qk_scale);  // the sink keeps it finite
    alpha[i] = ex2(m[i] - m_new);
    m[i] = m_new;
    m_scaled[i] = -m_new;
  }
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[4 * j + e] = ex2(fmaf(s[4 * j + e], qk_scale, m_scaled[e / 2]));
      sum[e / 2][(j % 2) * 2 + e % 2] += s[4 * j + e];
    }
  for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + ((sum[i][0] + sum[i][1]) + (sum[i][2] + sum[i][3]));
}

// P (bf16, kF16: fp16 A fragments of 16 keys each) from the exponentiated S accumulators: n-blocks 2kk and 2kk + 1.
template <bool kF16>
__device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&p)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      p[kk][e] = kF16 ? pack_f16x2(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1])
                      : pack_bf16x2(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
}

// Consumer warpgroup `consumer` (0 or 1): tokens [t0 + consumer * 64 / G, + 64 / G) of the block.
template <typename KvElem, int kPerKv, bool kTree>
__device__ __forceinline__ void consume(const AttentionParams& p, const StepView& step, const Block& b, int base,
                                        int consumer, uint32_t tiles, uint64_t* full, uint64_t* empty) {
  constexpr bool kFp8 = sizeof(KvElem) == 1;
  constexpr int kWgTokens = kWgRows / kPerKv;
  const int thread = threadIdx.x % 128, warp = thread / 32, lane = thread % 32, g = lane / 4, c = lane % 4;
  const int w0 = b.t0 + consumer * kWgTokens, w1 = min(w0 + kWgTokens, b.t1);
  // Tile t of the unit is the pipeline's tile base + t (produce).
  auto wait_full = [&](int t) { sm90::mbarrier_wait(&full[(base + t) % kStages], ((base + t) / kStages) & 1); };
  auto release = [&](int t) {
    __syncwarp();
    if (lane == 0) sm90::mbarrier_arrive(&empty[(base + t) % kStages]);
  };
  // A warpgroup without tokens (the block's last tokens all went to the other one) computes on its rows' stand-in
  // token like any row past the tokens, so both warpgroups run the same tiles and take turns at the tensor cores.

  // This thread's rows 16 warp + g and + 8: (token, head); rows past the warpgroup's tokens repeat the block's last
  // token before them (computed, never written).
  const bool sliding = p.window > 0;
  int token[2], head[2];
  RowKeys rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 16 * warp + g + 8 * i;
    token[i] = w0 + r / kPerKv;
    head[i] = b.kv_head * kPerKv + r % kPerKv;
    const int t = min(token[i], w1 - 1);
    rows[i].last = b.start + t;
    rows[i].lo = window_start(p.window, kTree ? step.positions[b.q_start + t] : rows[i].last);
    rows[i].mask = kTree ? tree_mask(step, b.q_start + t, sliding) : ~0ull;
  }
  // The block's tiles: those holding a key some row of either warpgroup sees. Rows' windows start between lo_min
  // and lo_max (a position is at most its slot), their last keys between first_slot and last_slot; a tile wholly
  // outside one warpgroup's rows is masked for it element by element.
  const int first_slot = b.start + b.t0, last_slot = b.start + b.t1 - 1;
  const int lo_min = window_start(p.window, kTree ? lowest_position(p, step, b, b.t0, b.t1) : first_slot);
  const int lo_max = window_start(p.window, last_slot);
  const int t_begin = (lo_min - b.key_lo) / kTileKeys, t_end = (last_slot - b.key_lo) / kTileKeys + 1;
  auto masked = [&](int key0) {
    if (key0 < lo_max) return true;
    return kTree ? key0 + kTileKeys - 1 >= b.start : key0 + kTileKeys - 1 > first_slot;
  };
  // Turns at the tensor cores (FlashAttention-3's ping-pong): a warpgroup issues its products only between the
  // other's, so one's softmax runs while the other's products do. Warpgroup c waits at barrier 1 + c and lets the
  // other go at barrier 2 - c; warpgroup 1 lets warpgroup 0 go first and skips its last turn's release, so every
  // barrier phase gets its 256 threads.
  auto turn_begin = [&] {
    sm90::named_barrier_sync(1 + consumer, 256);
  };
  auto turn_end = [&](bool last) {
    if (!(last && consumer == 1)) sm90::named_barrier_arrive(2 - consumer, 256);
  };
  if (consumer == 1) sm90::named_barrier_arrive(1, 256);

  // Q as A fragments of the four 16-dim k steps (rows past the tokens: zeros).
  const bf16* q = static_cast<const bf16*>(p.q);
  // (fp8 KV: as fp16 pairs.)
  auto q_word = [&](int i, int col) -> uint32_t {
    if (token[i] >= w1) return 0u;
    const uint32_t word = *reinterpret_cast<const uint32_t*>(
        q + (static_cast<int64_t>(b.q_start + token[i]) * p.heads + head[i]) * kHeadDim + col);
    return kFp8 ? bf16x2_to_f16x2(word) : word;
  };
  uint32_t q_frag[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    q_frag[ks][0] = q_word(0, 16 * ks + 2 * c);
    q_frag[ks][1] = q_word(1, 16 * ks + 2 * c);
    q_frag[ks][2] = q_word(0, 16 * ks + 8 + 2 * c);
    q_frag[ks][3] = q_word(1, 16 * ks + 8 + 2 * c);
  }

  const float qk_scale = p.scale * kLog2e * (kFp8 ? p.k_scale : 1.0f);
  const float sink[2] = {p.sinks[head[0]] * kLog2e, p.sinks[head[1]] * kLog2e};
  float m[2] = {sink[0], sink[1]}, l[2] = {0.0f, 0.0f}, alpha[2];
  float s[64] = {}, o[32] = {};
  uint32_t p_frag[8][4];
  auto issue_s = [&](int t) {
    const uint32_t k_tile = tiles + ((base + t) % kStages) * kStageBytes;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)  // 16 dims = 32 bytes along each swizzled row
      sm90::wgmma_m64n128k16<kFp8>(s, q_frag[ks], sm90::sw128_descriptor(k_tile + 32 * ks, 1024), ks > 0 ? 1u : 0u);
    sm90::wgmma_commit();
  };
  auto issue_pv = [&](int t) {
    const uint32_t v_tile = tiles + ((base + t) % kStages) * kStageBytes + kTileBytes;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)  // 16 keys = two 1024-byte groups of 8 rows
      sm90::wgmma_m64n64k16_mn_major_b<kFp8>(o, p_frag[kk], sm90::sw128_descriptor(v_tile + 2048 * kk, 1024));
    sm90::wgmma_commit();
  };
  auto key0_of = [&](int t) { return b.key_lo + t * kTileKeys; };

  for (int t = 0; t < t_begin; ++t) {
    wait_full(t);
    release(t);
  }
  wait_full(t_begin);
  turn_begin();
  sm90::wgmma_fence();
  issue_s(t_begin);
  turn_end(false);
  sm90::wgmma_wait<0>();
  sm90::fence_registers(s);
  online_softmax<kTree>(s, masked(key0_of(t_begin)), key0_of(t_begin), c, b.start, rows, qk_scale, m, l, alpha);
  pack_p<kFp8>(s, p_frag);
  for (int t = t_begin + 1; t < t_end; ++t) {
    wait_full(t);
    sm90::fence_registers(o);
    turn_begin();
    sm90::wgmma_fence();
    issue_s(t);
    issue_pv(t - 1);
    turn_end(false);
    sm90::wgmma_wait<1>();  // S of tile t
    sm90::fence_registers(s);
    online_softmax<kTree>(s, masked(key0_of(t)), key0_of(t), c, b.start, rows, qk_scale, m, l, alpha);
    sm90::wgmma_wait<0>();  // P V of tile t - 1
    sm90::fence_registers(o);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) sm90::fence_registers(p_frag[kk]);  // read by P V until now
    release(t - 1);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e / 2];
    pack_p<kFp8>(s, p_frag);
  }
  sm90::fence_registers(o);
  turn_begin();
  sm90::wgmma_fence();
  issue_pv(t_end - 1);
  turn_end(true);
  sm90::wgmma_wait<0>();
  sm90::fence_registers(o);
  release(t_end - 1);
  for (int t = t_end; t < b.tiles; ++t) {
    wait_full(t);
    release(t);
  }

  const float v_scale = kFp8 ? p.v_scale : 1.0f;
  bf16* out = static_cast<bf16*>(p.out);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float factor = v_scale / (quad_sum(l[i]) + ex2(sink[i] - m[i]));
    if (p.out_e4m3 != nullptr) {
      // Quantised for the output projection: heads 2h' and 2h' + 1 of a token (one 128-column group) are rows of
      // lanes 8h' .. 8h' + 7 (g = 2h', 2h' + 1 with G even: row = (token, head g % G)), each quad holding a row's 64
      // values; every lane joins the group's amax, stand-in rows too (their group's rows are stand-ins alike).
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) amax = fmaxf(amax, fabsf(o[4 * (j / 2) + 2 * i + j % 2] * factor));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
      const float scale = fmaxf(amax, 1e-4f) / kFp8E4m3Max;
      if (token[i] >= w1) continue;
      const int64_t t = b.q_start + token[i];
      uint8_t* row = p.out_e4m3 + (t * p.heads + head[i]) * kHeadDim;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t lo = __nv_cvt_float_to_fp8(o[4 * j + 2 * i] * factor / scale, __NV_SATFINITE, __NV_E4M3);
        const uint32_t hi = __nv_cvt_float_to_fp8(o[4 * j + 2 * i + 1] * factor / scale, __NV_SATFINITE, __NV_E4M3);
        *reinterpret_cast<uint16_t*>(row + 8 * j + 2 * c) = static_cast<uint16_t>(lo | hi << 8);
      }
      if (lane % 8 == 0) p.out_scales[static_cast<int64_t>(head[i] / 2) * p.out_scale_rows + t] = scale;
      continue;
    }
    if (token[i] >= w1) continue;
    bf16* row = out + (static_cast<int64_t>(b.q_start + token[i]) * p.heads + head[i]) * kHeadDim;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      *reinterpret_cast<uint32_t*>(row + 8 * j + 2 * c) = pack_bf16x2(o[4 * j + 2 * i] * factor, o[4 * j + 2 * i + 1] * factor);
  }
}

// Unit `unit` of a launch (a part of a query tile for one KV head; heaviest first: the last tiles of a causal prompt
// see the most keys) as a block's work; false when the part holds no tokens (a tile's last tokens need fewer parts).
template <int kPerKv, bool kTree>
__device__ bool block_of(const AttentionParams& p, const StepView& step, int parts, int unit, Block& b) {
  constexpr int kCtaTokens = kConsumers * kWgRows / kPerKv;
  b.kv_head = unit % p.kv_heads;
  const int rest = unit / p.kv_heads;
  const int part = parts - 1 - rest % parts, q_tile = step.num_q_tiles - 1 - rest / parts;
  b.seq = step.q_tile_seq[q_tile];
  const int q_len = step.seq_q_len[b.seq], row0 = step.q_tile_row0[q_tile];
  b.q_start = step.seq_q_start[b.seq];
  b.start = step.seq_context[b.seq] - q_len;
  b.t0 = row0 + part * kCtaTokens;
  b.t1 = min(min(b.t0 + kCtaTokens, row0 + kPrefillTileRows), q_len);
  if (b.t0 >= b.t1) return false;
  b.key_lo = window_start(p.window, kTree ? lowest_position(p, step, b, b.t0, b.t1) : b.start + b.t0);
  b.key_hi = b.start + b.t1 - 1;
  b.tiles = (b.key_hi - b.key_lo) / kTileKeys + 1;
  return true;
}

// kTree: the step has tree masks. KvElem: bf16 or fp8 (the cache's type). kPerKv: query heads per KV head (G).
// A block runs units blockIdx.x, + gridDim.x, ... of `units` in turn, its pipeline's stages and phases running on
// from one unit to the next, so the producer copies the next unit's first tiles while the consumers finish the last
// one's (launch_attention_prefill's `blocks`).
template <typename KvElem, int kPerKv, bool kTree>
__global__ void __launch_bounds__(kThreads, 1) attention_prefill_kernel(AttentionParams p, StepView step, int parts,
                                                                       int units) {
  pdl_prologue();
  extern __shared__ uint8_t shared[];
  uint8_t* tiles = shared + (1024 - shared_address(shared) % 1024) % 1024;  // the swizzle repeats every 1024 bytes
  uint8_t* staging = tiles + kStages * kStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + (sizeof(KvElem) == 1 ? 2 * kStagingBytes : 0));
  uint64_t* empty = full + kStages;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      sm90::mbarrier_init(&full[i], 4);                 // the producer's warps
      sm90::mbarrier_init(&empty[i], 4 * kConsumers);  // the consumers' warps
    }
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  // Each role walks the units itself (one loop holding both roles' code left ptxas short of registers for the
  // consumers' wgmmas); `base` counts the tiles of the block's earlier units.
  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<kProducerRegisters>();
    for (int unit = static_cast<int>(blockIdx.x), base = 0; unit < units; unit += static_cast<int>(gridDim.x)) {
      Block b;
      if (!block_of<kPerKv, kTree>(p, step, parts, unit, b)) continue;
      produce<KvElem>(p, step, b, base, tiles, staging, full, empty);
      base += b.tiles;
    }
  } else {
    sm90::setmaxnreg_inc<kConsumerRegisters>();
    const int consumer = threadIdx.x / 128 - 1;
    for (int unit = static_cast<int>(blockIdx.x), base = 0; unit < units; unit += static_cast<int>(gridDim.x)) {
      Block b;
      if (!block_of<kPerKv, kTree>(p, step, parts, unit, b)) continue;
      consume<KvElem, kPerKv, kTree>(p, step, b, base, consumer, shared_address(tiles), full, empty);
      base += b.tiles;
    }
  }
}

template <typename KvElem, int kPerKv, bool kTree>
auto* kernel_for() {
  auto* kernel = attention_prefill_kernel<KvElem, kPerKv, kTree>;
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), shared_bytes<KvElem>());
  return kernel;
}

template <typename KvElem, int kPerKv>
void launch_typed(cudaStream_t stream, const AttentionParams& params, const StepView& step, int blocks) {
  const int parts = std::max(1, kPrefillTileRows / (kConsumers * kWgRows / kPerKv));
  const int units = step.num_q_tiles * parts * params.kv_heads;
  if (blocks <= 0) blocks = params.window > 0 ? device_multiprocessors() : units;
  const dim3 grid(static_cast<unsigned>(std::min(blocks, units)));
  auto* kernel = step.tree_masks != nullptr ? kernel_for<KvElem, kPerKv, true>() : kernel_for<KvElem, kPerKv, false>();
  MOESERVE_CUDA_CHECK(cuda_launch(kernel, grid, kThreads, shared_bytes<KvElem>(), stream, params, step, parts, units));
}

template <typename KvElem>
void launch_per_kv(cudaStream_t stream, const AttentionParams& params, const StepView& step, int blocks) {
  switch (params.heads / params.kv_heads) {
    case 1: return launch_typed<KvElem, 1>(stream, params, step, blocks);
    case 2: return launch_typed<KvElem, 2>(stream, params, step, blocks);
    case 4: return launch_typed<KvElem, 4>(stream, params, step, blocks);
    case 8: return launch_typed<KvElem, 8>(stream, params, step, blocks);
    default: fail_cuda("attention_prefill", "query heads per KV head must be 1, 2, 4 or 8", __FILE__, __LINE__);
  }
}

}  // namespace

void launch_attention_prefill(cudaStream_t stream, const AttentionParams& params, const StepView& step, int blocks) {
  if (step.num_q_tiles == 0) return;
  if (params.head_dim != kHeadDim) fail_cuda("attention_prefill", "head_dim must be 64", __FILE__, __LINE__);
  if (params.kv_heads <= 0 || params.heads % params.kv_heads != 0)
    fail_cuda("attention_prefill", "query heads must be a multiple of KV heads", __FILE__, __LINE__);
  if (params.out_e4m3 != nullptr && (params.heads / params.kv_heads % 2 != 0 || params.out_scale_rows < step.num_tokens))
    fail_cuda("attention_prefill", "an e4m3 output needs an even count of query heads per KV head and scales for "
              "every token", __FILE__, __LINE__);
  switch (params.kv.dtype) {
    case KvDtype::bf16: launch_per_kv<bf16>(stream, params, step, blocks); break;
    case KvDtype::fp8_e4m3: launch_per_kv<fp8>(stream, params, step, blocks); break;
    default: fail_cuda("attention_prefill", "the KV cache must be bf16 or fp8", __FILE__, __LINE__);
  }
}

}  // namespace moeserve::cuda
