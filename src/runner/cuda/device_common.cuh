// Device helpers shared by the kernels: element conversions, warp reductions, paged-KV addressing, the
// MXFP4 dequantiser and thin wrappers over the sm_80+ instructions used (mma.sync, ldmatrix, cp.async).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runner/cuda/cuda_check.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

using bf16 = __nv_bfloat16;

inline constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One round of a warp's top-k over ids 0 .. E - 1 held every 32nd by lane (id lane + 32 i in values[i]): the id of
// the largest value, ties to the lower id, on every lane; its value is returned in *value and marked -inf.
template <int kPerLane>
__device__ __forceinline__ int warp_take_max(float (&values)[kPerLane], int E, float* value) {
  const int lane = threadIdx.x % 32;
  float best = -INFINITY;
  int best_id = E;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < E && (values[i] > best || (values[i] == best && e < best_id))) {
      best = values[i];
      best_id = e;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
    if (other > best || (other == best && other_id < best_id)) {
      best = other;
      best_id = other_id;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i == best_id) values[i] = -INFINITY;
  *value = best;
  return best_id;
}

// Token t's router top-k over logits [T, E] and the softmax over the k winners (ties to the lower id: the CPU
// reference cpu::route_top_k), by one warp: k rounds of warp_take_max, then on lane 0 put(j, expert, weight) for
// slots j = 0 .. k - 1. router.cu's kernel and the fused route-and-group kernel (moe_grouping.cu) both run this, so
// their weights are the same bits.
template <typename Put>
__device__ __forceinline__ void warp_route_top_k(const float* logits, int t, int E, int k, Put&& put) {
  constexpr int kPerLane = kMaxExperts / 32;
  const int lane = threadIdx.x % 32;
  float values[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    values[i] = e < E ? logits[static_cast<int64_t>(t) * E + e] : -INFINITY;
  }
  float top_value[kMaxTopK];
  int top_id[kMaxTopK];
  for (int j = 0; j < k; ++j) {
    float best = 0.0f;
    const int best_id = warp_take_max(values, E, &best);
    // Registers indexed by the loop counter: k is small and the loop is unrolled up to kMaxTopK.
#pragma unroll
    for (int slot = 0; slot < kMaxTopK; ++slot)
      if (slot == j) {
        top_value[slot] = best;
        top_id[slot] = best_id;
      }
  }
  if (lane != 0) return;
  float sum = 0.0f;
  float w[kMaxTopK];
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= k) break;
    w[j] = expf(top_value[j] - top_value[0]);
    sum += w[j];
  }
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= k) break;
    put(j, top_id[j], w[j] / sum);
  }
}

// Max and sum over the four lanes of a quad (lanes 4g .. 4g + 3: the threads holding one row of an mma.sync
// accumulator tile).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += partial[w];
  return total;
}

// Element offset of K (which = 0) or V (which = 1) of row `row` (0 .. block_size - 1) of pool block `block`, layer
// slot `slot`, for one KV head.
__device__ __forceinline__ int64_t kv_block_offset(const KvView& kv, int32_t block, int slot, int which, int head,
                                                   int row) {
  return ((((static_cast<int64_t>(block) * kv.layers_per_block + slot) * 2 + which) * kv.kv_heads + head) *
              kv.block_size +
          row) *
         kv.head_dim;
}

// The same for KV slot `position` through one block table, or -1 where the table has no block (a sliding-window
// block given back).
__device__ __forceinline__ int64_t kv_table_offset(const KvView& kv, const int32_t* table, int slot, int which,
                                                   int head, int position) {
  const int block = table[position / kv.block_size];
  if (block < 0) return -1;
  return kv_block_offset(kv, block, slot, which, head, position % kv.block_size);
}

// Sequence `seq`'s block table of `group` in a step.
__device__ __forceinline__ const int32_t* step_block_table(const StepView& step, int seq, int group) {
  return step.block_tables + (static_cast<int64_t>(seq) * step.num_groups + group) * *step.table_stride;
}

// kv_table_offset through sequence `seq`'s block table of `group` in a step.
__device__ __forceinline__ int64_t kv_offset(const KvView& kv, const StepView& step, int seq, int group, int slot,
                                             int which, int head, int position) {
  return kv_table_offset(kv, step_block_table(step, seq, group), slot, which, head, position);
}

// ---- tree steps (StepView::tree_masks) ------------------------------------------------------------------------------
// The KV slot token t of sequence `seq` writes: its position, or in a tree step start_position + its index.
__device__ __forceinline__ int token_slot(const StepView& step, int t, int seq) {
  if (step.tree_masks == nullptr) return step.positions[t];
  return step.seq_context[seq] - step.seq_q_len[seq] + (t - step.seq_q_start[seq]);
}

// The step keys token t sees (bit j: the j-th token of its sequence), for a sliding or a full layer; all ones
// outside tree steps.
__device__ __forceinline__ uint64_t tree_mask(const StepView& step, int t, bool sliding) {
  if (step.tree_masks == nullptr) return ~0ull;
  const int32_t* words = step.tree_masks + (static_cast<int64_t>(t) * 2 + (sliding ? 1 : 0)) * 2;
  return static_cast<uint64_t>(static_cast<uint32_t>(words[0])) | static_cast<uint64_t>(static_cast<uint32_t>(words[1])) << 32;
}

// Whether a key slot (already inside the query's window and at most its own slot) passes the query's tree mask:
// slots before the step's start are the cached prefix, which every token sees; a tree has at most 64 tokens, so
// step keys past the 64th are a causal sequence's (mask all ones).
__device__ __forceinline__ bool tree_visible(uint64_t mask, int key, int start_position) {
  const int j = key - start_position;
  return j < 0 || j >= kMaxTreeTokens || ((mask >> j) & 1u) != 0;
}

// ---- MXFP4 ------------------------------------------------------------------------------------------------------
// An e2m1 nibble placed at float bits 22..24 (magnitude) and 31 (sign) is the value times 2^-126 (subnormal for
// the e2m1 subnormal 0.5, which fp32 multiplication keeps exact), so one multiplication by 2^(scale - 127 + 126)
// gives value * 2^(scale - 127) exactly. The factor is a normal float for scale bytes 0..128 (load checks that).
__device__ __forceinline__ float mxfp4_factor(uint32_t scale) { return __int_as_float((scale + 126u) << 23); }

// The two values of one byte (low nibble first) times `factor`.
__device__ __forceinline__ float2 mxfp4_pair(uint32_t byte, float factor) {
  const float lo = __int_as_float(((byte & 0x7u) << 22) | ((byte & 0x8u) << 28));
  const float hi = __int_as_float(((byte & 0x70u) << 18) | ((byte & 0x80u) << 24));
  return make_float2(lo * factor, hi * factor);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Word i (0..3) of a 16-byte vector; i must be a compile-time constant after unrolling. (The tensor-core paths
// convert MXFP4 to bf16 a word at a time: moe_layout.h.)
__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// ---- MoE tiles ----------------------------------------------------------------------------------------------------
// One tile of the grouping (launch_group_by_expert): its expert, its first grouped row, and the end of the expert's
// rows (the tile's rows are row0 .. min(row0 + tile size, row_end) - 1). False for a tile past the step's count
// (the grids are sized for the most tiles a step can have).
struct MoeTile {
  int expert = 0, row0 = 0, row_end = 0;
};
// The tiles a launch reads: all of them (tile_class -1), or one class of a mixed or split grouping, whose classes
// follow each other in the list. Their count, and the index of the first.
__device__ __forceinline__ int moe_class_tile_count(const MoeRouting& r) {
  return r.tile_class < 0 ? r.num_tiles[0] : r.num_tiles[1 + r.tile_class];
}
__device__ __forceinline__ int moe_class_tile_base(const MoeRouting& r) {
  int base = 0;
  for (int c = 0; c < r.tile_class; ++c) base += r.num_tiles[1 + c];
  return base;
}
__device__ __forceinline__ bool moe_tile(const MoeRouting& r, int tile, MoeTile& t) {
  if (tile >= moe_class_tile_count(r)) return false;
  tile += moe_class_tile_base(r);
  t.expert = r.tile_expert[tile];
  t.row0 = r.tile_row0[tile];
  t.row_end = r.expert_offsets[t.expert + 1];
  return true;
}

// The weight row of fragment row g (which = 0) or g + 8 (which = 1) of m16 slab `slab` in the mma.sync expert
// kernels: for the first projection (SwiGLU) rows 2j and 2j + 1, a gate / up pair, so that the thread holding
// both applies SwiGLU; otherwise rows g and g + 8 of the slab.
__device__ __forceinline__ int64_t moe_slab_row(int64_t slab, int g, int which, bool swiglu) {
  return swiglu ? 2 * (slab * 8 + g) + which : slab * 16 + g + 8 * which;
}

// ---- tensor core and async copy wrappers --------------------------------------------------------------------------
// d += a * b for a 16x16 (row) bf16 tile a and a 16x8 (col) bf16 tile b, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a * b (no accumulator in) for a 16x32 (row) e4m3 tile a and a 32x8 (col) e4m3 tile b, fp32 out (sm_89+).
// Fragments (PTX ISA 9.7.14.5.8, m16n8k32 with 8-bit types): a0 / a2 hold row g, k 4c .. 4c + 3 / 16 + 4c ..
// 16 + 4c + 3, a1 / a3 the same k of row g + 8; b0 / b1 k 4c .. 4c + 3 / 16 + 4c .. of column g; d as bf16's.
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// The same with fp16 operands (the fp8 KV path converts e4m3 to fp16 exactly).
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(shared_address(row)));
}

// 16 bytes global -> shared, bypassing L1, to a shared-space address; `bytes` 0 zero-fills (`source` is not read).
__device__ __forceinline__ void cp_async_16_to(uint32_t destination, const void* source, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source), "r"(bytes));
}
// The same to a generic pointer into shared memory; zero-filled when !valid.
__device__ __forceinline__ void cp_async_16(void* destination, const void* source, bool valid) {
  cp_async_16_to(shared_address(destination), source, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// 16-byte load through the read-only path (weights, never written during a step).
__device__ __forceinline__ uint4 load_weights_16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ float swiglu(float gate, float up, float alpha, float limit) {
  gate = fminf(gate, limit);
  up = fminf(fmaxf(up, -limit), limit);
  const float glu = gate / (1.0f + expf(-alpha * gate));
  return glu * (up + 1.0f);
}

inline int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace moeserve::cuda
