// The EAGLE-3 draft head's kernels (declared in eagle3_kernels.h): the layer input (embedding gather and the two
// input norms), Llama RoPE with the draft KV write, attention over a row's draft KV slots, the SiLU-gated MLP's
// activation, chain token mapping and per-row top-k log-probabilities for tree search. One version each but
// attention: the head's cost is otherwise its weight bytes (see eagle3_cuda_drafter.h), so those favour
// simplicity, while attention's KV bytes grow with batch and context (gpt-oss's head: 85 MB at 32 rows of 1,300).
// CPU reference: speculative::Eagle3Drafter::forward_rows and draft_log_probs (runner/cpu/eagle3_drafter.cc).
#include <algorithm>
#include <cfloat>

#include <cooperative_groups.h>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/eagle3_kernels.h"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = 256;

// Physical slot (block * block_size + offset) of a row's logical KV slot.
__device__ __forceinline__ int64_t physical_slot(const DraftKvView& kv, const DraftRows& rows, int r, int logical) {
  const int32_t* table = rows.block_tables + static_cast<int64_t>(rows.row_table[r]) * *rows.table_stride;
  return static_cast<int64_t>(table[logical / kv.block_size]) * kv.block_size + logical % kv.block_size;
}

__device__ __forceinline__ bf16* kv_row(const DraftKvView& kv, int64_t physical, int which) {
  const int64_t kv_dim = static_cast<int64_t>(kv.kv_heads) * kv.head_dim;
  return static_cast<bf16*>(kv.base) + (physical * 2 + which) * kv_dim;
}

__global__ void layer_input_kernel(DraftLayerInput p) {
  pdl_prologue();
  const int64_t r = blockIdx.x;
  const int H = p.hidden;
  const bf16* e = static_cast<const bf16*>(p.embedding) + static_cast<int64_t>(p.tokens[r]) * H;
  const float* g = p.g + r * H;
  float se = 0.0f, sg = 0.0f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float a = to_float(e[i]), b = g[i];
    se += a * a;
    sg += b * b;
  }
  se = block_sum(se);
  sg = block_sum(sg);
  const float inv_e = 1.0f / sqrtf(se / static_cast<float>(H) + p.eps);
  const float inv_g = 1.0f / sqrtf(sg / static_cast<float>(H) + p.eps);
  bf16* out = static_cast<bf16*>(p.attn_in) + r * 2 * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    out[i] = from_float<bf16>(to_float(e[i]) * inv_e * p.input_layernorm[i]);
    const float normed = g[i] * inv_g * p.hidden_norm[i];
    out[H + i] = from_float<bf16>(normed);
    p.residual[r * H + i] = p.norm_before_residual ? normed : g[i];
  }
}

// Block (row, head), head_dim / 2 threads: one rotated pair each. Heads: q, then k, then v (copied).
__global__ void rope_kv_kernel(const float* qkv, int heads, const float* inv_freq, bf16* q_out, DraftKvView kv,
                               DraftRows rows) {
  pdl_prologue();
  const int r = blockIdx.x, h = blockIdx.y, i = threadIdx.x, D = kv.head_dim, half = D / 2;
  const float* src = qkv + (static_cast<int64_t>(r) * (heads + 2 * kv.kv_heads) + h) * D;
  float y1 = src[i], y2 = src[i + half];
  if (h < heads + kv.kv_heads) {
    // fp32 angle as transformers computes it (cpu::apply_rope).
    const float angle = static_cast<float>(rows.position[r] + rows.step) * inv_freq[i];
    const float c = cosf(angle), s = sinf(angle), x1 = y1, x2 = y2;
    y1 = x1 * c - x2 * s;
    y2 = x2 * c + x1 * s;
  }
  bf16* dst;
  if (h < heads) {
    dst = q_out + (static_cast<int64_t>(r) * heads + h) * D;
  } else {
    const int which = h < heads + kv.kv_heads ? 0 : 1, head = (h - heads) % kv.kv_heads;
    dst = kv_row(kv, physical_slot(kv, rows, r, rows.slot[r] + rows.step), which) + head * D;
  }
  dst[i] = from_float<bf16>(y1);
  dst[i + half] = from_float<bf16>(y2);
}

// Attention, flash-decoding as attention_decode.cu does for the target. Grid (key split, KV head, row), the splits
// of a (row, KV head) one thread-block cluster. A block holds the q vectors of the KV head's query heads (GQA:
// each K and V row is loaded once for all of them); each warp walks 32 keys at a time, one per lane, with an
// online softmax in the log2 domain; a lane stages its key's value row in shared memory, from where every lane
// accumulates the output dimensions it owns. The warps merge in shared memory, the cluster's blocks through
// distributed shared memory: one kernel and no scratch, so a captured graph replays it for any prefix lengths.
// Version 1 (attention_any_shape_kernel, kept for the shapes this one does not cover) had a block per (row, query
// head) walking one key per warp step, so every head of a group re-read its K and V.
template <int kHeadDim>
__host__ __device__ constexpr int attention_warps() {
  return 512 / kHeadDim;  // 32 KB of staged value rows per block for either head_dim
}

template <int kHeadDim, int kPerKv>
__global__ void __launch_bounds__(attention_warps<kHeadDim>() * 32, 2)
    attention_kernel(const bf16* q, int heads, float scale, DraftKvView kv, DraftRows rows, bf16* out) {
  pdl_prologue();
  constexpr int kWarps = attention_warps<kHeadDim>();
  constexpr int kDims = kHeadDim / 32;     // output dimensions per lane
  constexpr int kChunks = kHeadDim / 8;    // 16-byte chunks of a K or V row
  constexpr int kPartChunks = 8;           // a row is loaded 64 dimensions at a time (registers)
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int splits = gridDim.x, split = blockIdx.x, kv_head = blockIdx.y, r = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int prefix = rows.prefix[r] + rows.step, keys = prefix + rows.extra_count[r];
  const int32_t* extra = rows.extra_slots + rows.extra_begin[r];
  const int32_t* table = rows.block_tables + static_cast<int64_t>(rows.row_table[r]) * *rows.table_stride;
  const int chunk = (keys + splits - 1) / splits;
  const int k0 = split * chunk, k1 = min(keys, k0 + chunk);

  __shared__ float q_s[kPerKv][kHeadDim];
  __shared__ __align__(16) float p_s[kWarps][kPerKv][32];  // each warp's current 32 probabilities per head
  // Each warp's 32 value rows (16-byte chunk i of row j at i ^ (j % 8): conflict-free stores and loads), then the
  // warps' partial outputs.
  __shared__ __align__(16) uint4 stage[kWarps][32][kChunks];
  __shared__ float m_s[kWarps][kPerKv], l_s[kWarps][kPerKv];
  __shared__ float block_m[kPerKv], block_l[kPerKv], block_o[kPerKv][kHeadDim];
  static_assert(sizeof(float) * kWarps * kPerKv * kHeadDim <= sizeof(stage));

  const float q_scale = scale * kLog2e;
  const bf16* qg = q + (static_cast<int64_t>(r) * heads + kv_head * kPerKv) * kHeadDim;
  for (int i = threadIdx.x; i < kPerKv * kHeadDim; i += blockDim.x)
    q_s[i / kHeadDim][i % kHeadDim] = to_float(qg[i]) * q_scale;
  __syncthreads();

  float m[kPerKv], l[kPerKv], o[kPerKv][kDims];
#pragma unroll
  for (int h = 0; h < kPerKv; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;  // this lane's share; m is the warp's
#pragma unroll
    for (int d = 0; d < kDims; ++d) o[h][d] = 0.0f;
  }
  const int64_t kv_dim = static_cast<int64_t>(kv.kv_heads) * kHeadDim;
  const bf16* cache = static_cast<const bf16*>(kv.base) + kv_head * kHeadDim;
  uint4(*v_s)[kChunks] = stage[warp];
  for (int base = k0 + warp * 32; base < k1; base += kWarps * 32) {
    const int key = base + lane;
    const bool valid = key < k1;
    float s[kPerKv];
#pragma unroll
    for (int h = 0; h < kPerKv; ++h) s[h] = valid ? 0.0f : -INFINITY;
    if (valid) {
      const int logical = key < prefix ? key : extra[key - prefix];
      const int64_t physical =
          static_cast<int64_t>(table[logical / kv.block_size]) * kv.block_size + logical % kv.block_size;
      const uint4* k_row = reinterpret_cast<const uint4*>(cache + physical * 2 * kv_dim);
      const uint4* v_row = reinterpret_cast<const uint4*>(cache + (physical * 2 + 1) * kv_dim);
#pragma unroll
      for (int part = 0; part < kChunks; part += kPartChunks) {
        uint4 k_chunk[kPartChunks], v_chunk[kPartChunks];
#pragma unroll
        for (int i = 0; i < kPartChunks; ++i) {
          k_chunk[i] = k_row[part + i];
          v_chunk[i] = v_row[part + i];
        }
#pragma unroll
        for (int i = 0; i < kPartChunks; ++i) v_s[lane][(part + i) ^ (lane % 8)] = v_chunk[i];
#pragma unroll
        for (int i = 0; i < kPartChunks; ++i) {
          const uint32_t words[4] = {k_chunk[i].x, k_chunk[i].y, k_chunk[i].z, k_chunk[i].w};
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const float lo = __uint_as_float(words[w] << 16), hi = __uint_as_float(words[w] & 0xffff0000u);
            const int d = (part + i) * 8 + 2 * w;
#pragma unroll
            for (int h = 0; h < kPerKv; ++h) s[h] += q_s[h][d] * lo + q_s[h][d + 1] * hi;
          }
        }
      }
    } else {
      // Probability 0, but the row is read: zeros, never stale bits that could be NaN.
#pragma unroll
      for (int i = 0; i < kChunks; ++i) v_s[lane][i] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int h = 0; h < kPerKv; ++h) {
      const float m_new = fmaxf(m[h], warp_max(s[h]));
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
      const float prob = valid ? exp2f(s[h] - m_new) : 0.0f;
      l[h] = l[h] * alpha + prob;
#pragma unroll
      for (int d = 0; d < kDims; ++d) o[h][d] *= alpha;
      m[h] = m_new;
      p_s[warp][h][lane] = prob;
    }
    __syncwarp();
    // Lane owns dimensions [lane * kDims, + kDims): 16-byte chunk lane * kDims / 8 of each staged row.
    const int count = min(32, k1 - base), own_chunk = lane * kDims / 8, own_word = (lane * kDims % 8) / 2;
    for (int j = 0; j < count; j += 4) {
      float4 p4[kPerKv];
#pragma unroll
      for (int h = 0; h < kPerKv; ++h) p4[h] = *reinterpret_cast<const float4*>(&p_s[warp][h][j]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t* v = reinterpret_cast<const uint32_t*>(&v_s[j + e][own_chunk ^ ((j + e) % 8)]) + own_word;
        float vd[kDims];
#pragma unroll
        for (int w = 0; w < kDims / 2; ++w) {
          vd[2 * w] = __uint_as_float(v[w] << 16);
          vd[2 * w + 1] = __uint_as_float(v[w] & 0xffff0000u);
        }
#pragma unroll
        for (int h = 0; h < kPerKv; ++h) {
          const float p = e == 0 ? p4[h].x : e == 1 ? p4[h].y : e == 2 ? p4[h].z : p4[h].w;
#pragma unroll
          for (int d = 0; d < kDims; ++d) o[h][d] += p * vd[d];
        }
      }
    }
    __syncwarp();  // v_s and p_s are rewritten by the next iteration
  }

  __syncthreads();  // stage now holds the warps' outputs
  float(*o_s)[kPerKv][kHeadDim] = reinterpret_cast<float(*)[kPerKv][kHeadDim]>(&stage[0][0][0]);
#pragma unroll
  for (int h = 0; h < kPerKv; ++h) {
    const float l_warp = warp_sum(l[h]);
    if (lane == 0) {
      m_s[warp][h] = m[h];
      l_s[warp][h] = l_warp;
    }
#pragma unroll
    for (int d = 0; d < kDims; ++d) o_s[warp][h][lane * kDims + d] = o[h][d];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kPerKv * kHeadDim; i += blockDim.x) {
    const int h = i / kHeadDim, d = i % kHeadDim;
    float max_all = -INFINITY, sum = 0.0f, acc = 0.0f;
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, m_s[w][h]);
    if (max_all != -INFINITY) {  // else no warp saw a key
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(m_s[w][h] - max_all);
        sum += l_s[w][h] * f;
        acc += o_s[w][h][d] * f;
      }
    }
    if (d == 0) {
      block_m[h] = max_all;
      block_l[h] = sum;
    }
    block_o[h][d] = acc;
  }
  cluster.sync();
  // The cluster's blocks share the outputs (block `split` takes every splits-th group of blockDim of them), each
  // merging all blocks' partials. A row without keys gets zeros.
  for (int i = split * blockDim.x + threadIdx.x; i < kPerKv * kHeadDim; i += splits * blockDim.x) {
    const int h = i / kHeadDim, d = i % kHeadDim;
    float max_all = -INFINITY, sum = 0.0f, acc = 0.0f;
    for (int b = 0; b < splits; ++b) max_all = fmaxf(max_all, *cluster.map_shared_rank(&block_m[h], b));
    if (max_all != -INFINITY) {
      for (int b = 0; b < splits; ++b) {
        const float f = exp2f(*cluster.map_shared_rank(&block_m[h], b) - max_all);
        sum += *cluster.map_shared_rank(&block_l[h], b) * f;
        acc += *cluster.map_shared_rank(&block_o[h][d], b) * f;
      }
    }
    out[(static_cast<int64_t>(r) * heads + kv_head * kPerKv + h) * kHeadDim + d] =
        from_float<bf16>(sum > 0.0f ? acc / sum : 0.0f);
  }
  cluster.sync();  // this block's shared memory stays until the cluster has read it
}

constexpr int kMaxHeadDim = 128;
constexpr int kAnyShapeWarps = 4;

// Version 1, for shapes attention_kernel does not instantiate (head_dim a multiple of 32 up to 128, any GQA
// group). Block (row, head); each warp takes every kAnyShapeWarps-th key with an online softmax, lanes holding
// head_dim / 32 dimensions; the warps' partial results are merged at the end.
__global__ void attention_any_shape_kernel(const bf16* q, int heads, float scale, DraftKvView kv, DraftRows rows,
                                           bf16* out) {
  pdl_prologue();
  constexpr int kPer = kMaxHeadDim / 32;
  const int r = blockIdx.x, h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32, D = kv.head_dim;
  const int per = D / 32, kv_head = h / (heads / kv.kv_heads);
  const bf16* qh = q + (static_cast<int64_t>(r) * heads + h) * D;
  float qv[kPer], acc[kPer];
  for (int j = 0; j < kPer; ++j) {
    qv[j] = j < per ? to_float(qh[lane + 32 * j]) : 0.0f;
    acc[j] = 0.0f;
  }
  const int prefix = rows.prefix[r] + rows.step, extras = rows.extra_count[r];
  const int32_t* extra = rows.extra_slots + rows.extra_begin[r];
  float m = -INFINITY, l = 0.0f;
  for (int t = warp; t < prefix + extras; t += kAnyShapeWarps) {
    const int64_t physical = physical_slot(kv, rows, r, t < prefix ? t : extra[t - prefix]);
    const bf16* k = kv_row(kv, physical, 0) + kv_head * D;
    const bf16* v = kv_row(kv, physical, 1) + kv_head * D;
    float dot = 0.0f;
    for (int j = 0; j < per; ++j) dot += qv[j] * to_float(k[lane + 32 * j]);
    const float s = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, s), correction = expf(m - m_new), p = expf(s - m_new);
    l = l * correction + p;
    for (int j = 0; j < per; ++j) acc[j] = acc[j] * correction + p * to_float(v[lane + 32 * j]);
    m = m_new;
  }
  __shared__ float warp_m[kAnyShapeWarps], warp_l[kAnyShapeWarps], warp_acc[kAnyShapeWarps][kMaxHeadDim];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  for (int j = 0; j < per; ++j) warp_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  if (warp != 0) return;
  float m_all = -INFINITY;
  for (int w = 0; w < kAnyShapeWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f, total[kPer] = {};
  for (int w = 0; w < kAnyShapeWarps; ++w) {
    if (warp_l[w] == 0.0f) continue;  // a warp that saw no key
    const float factor = expf(warp_m[w] - m_all);
    l_all += warp_l[w] * factor;
    for (int j = 0; j < per; ++j) total[j] += warp_acc[w][lane + 32 * j] * factor;
  }
  bf16* o = out + (static_cast<int64_t>(r) * heads + h) * D;
  for (int j = 0; j < per; ++j) o[lane + 32 * j] = from_float<bf16>(l_all > 0.0f ? total[j] / l_all : 0.0f);
}

// Splits per (row, KV head), one cluster: enough blocks for two per multiprocessor, at most 8 (the portable
// cluster size). From the row and head counts only, so a graph captured for a chain suits every replay.
int attention_splits(int rows, int kv_heads) {
  int device = 0, multiprocessors = 0;
  MOESERVE_CUDA_CHECK(cudaGetDevice(&device));
  MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  const int blocks = rows * kv_heads;
  return std::clamp((2 * multiprocessors + blocks - 1) / blocks, 1, 8);
}

template <int kHeadDim, int kPerKv>
void launch_attention(cudaStream_t stream, const bf16* q, int heads, float scale, const DraftKvView& kv,
                      const DraftRows& rows, bf16* out) {
  const int splits = attention_splits(rows.rows, kv.kv_heads);
  cudaLaunchAttribute attributes[2] = {{}, programmatic_serialization()};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = splits;
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(splits, kv.kv_heads, rows.rows);
  config.blockDim = dim3(attention_warps<kHeadDim>() * 32);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = programmatic_launch_on(stream) ? 2 : 1;  // the cluster shape, and PDL when it is on
  MOESERVE_CUDA_CHECK(cudaLaunchKernelEx(&config, attention_kernel<kHeadDim, kPerKv>, q, heads, scale, kv, rows, out));
}

template <int kHeadDim>
bool launch_attention_for_group(cudaStream_t stream, const bf16* q, int heads, float scale, const DraftKvView& kv,
                                const DraftRows& rows, bf16* out) {
  switch (heads / kv.kv_heads) {
    case 1: launch_attention<kHeadDim, 1>(stream, q, heads, scale, kv, rows, out); return true;
    case 2: launch_attention<kHeadDim, 2>(stream, q, heads, scale, kv, rows, out); return true;
    case 4: launch_attention<kHeadDim, 4>(stream, q, heads, scale, kv, rows, out); return true;
    case 8: launch_attention<kHeadDim, 8>(stream, q, heads, scale, kv, rows, out); return true;
    default: return false;
  }
}

__global__ void silu_mul_kernel(const float* gate_up, int rows, int64_t I, bf16* out) {
  pdl_prologue();
  const int64_t n = rows * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    const float gate = gate_up[r * 2 * I + c], up = gate_up[r * 2 * I + I + c];
    out[i] = from_float<bf16>(gate / (1.0f + expf(-gate)) * up);
  }
}

__global__ void to_bf16_kernel(const float* x, int64_t n, bf16* out) {
  pdl_prologue();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<bf16>(x[i]);
}

__global__ void draft_tokens_kernel(const int32_t* draft_ids, const int32_t* d2t, int rows, int k, int depth,
                                    int32_t* next_tokens, int32_t* drafted) {
  pdl_prologue();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int32_t id = draft_ids[r];
  const int32_t target = d2t != nullptr ? id + d2t[id] : id;
  next_tokens[r] = target;
  drafted[static_cast<int64_t>(r) * k + depth] = target;
}

// a ranks before b: the larger value, the lower id on ties.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

__device__ void block_best(float& value, int& id) {
  __shared__ float values[32];
  __shared__ int ids[32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const int i = __shfl_xor_sync(0xffffffffu, id, offset);
    if (ranks_before(v, i, value, id)) value = v, id = i;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) values[warp] = value, ids[warp] = id;
  __syncthreads();
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w)
    if (ranks_before(values[w], ids[w], value, id)) value = values[w], id = ids[w];
}

// One block per row: the max, the log of the sum of exponentials, then k passes each taking the best id ranked
// after the previous pick.
__global__ void top_k_log_probs_kernel(const float* logits, int V, int k, float* log_probs, int32_t* ids) {
  pdl_prologue();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  float best = -INFINITY;
  int best_id = V;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    if (ranks_before(row[i], i, best, best_id)) best = row[i], best_id = i;
  block_best(best, best_id);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(row[i] - best);
  const float log_sum = logf(block_sum(sum)) + best;
  float previous = INFINITY;
  int previous_id = -1;
  for (int pick = 0; pick < k; ++pick) {
    float value = -INFINITY;
    int id = V;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
      if (ranks_before(previous, previous_id, row[i], i) && ranks_before(row[i], i, value, id)) value = row[i], id = i;
    block_best(value, id);
    if (threadIdx.x == 0) {
      log_probs[static_cast<int64_t>(blockIdx.x) * k + pick] = value - log_sum;
      ids[static_cast<int64_t>(blockIdx.x) * k + pick] = id;
    }
    previous = value;
    previous_id = id;
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

}  // namespace

void launch_draft_layer_input(cudaStream_t stream, const DraftLayerInput& params, int rows) {
  if (rows == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(layer_input_kernel, rows, kThreads, 0, stream, params));
}

void launch_draft_rope_kv_write(cudaStream_t stream, const float* qkv, int heads, const float* inv_freq, void* q_out,
                                const DraftKvView& kv, const DraftRows& rows) {
  if (rows.rows == 0) return;
  if (kv.head_dim % 64 != 0 || kv.head_dim > kMaxHeadDim)
    fail_cuda("draft_rope_kv_write", "head_dim must be 64 or 128", __FILE__, __LINE__);
  const dim3 grid(rows.rows, heads + 2 * kv.kv_heads);
  MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_kernel, grid, kv.head_dim / 2, 0, stream, qkv, heads, inv_freq,
                                  static_cast<bf16*>(q_out), kv, rows));
}

void launch_draft_attention(cudaStream_t stream, const void* q, int heads, float scale, const DraftKvView& kv,
                            const DraftRows& rows, void* out) {
  if (rows.rows == 0) return;
  if (kv.head_dim % 32 != 0 || kv.head_dim > kMaxHeadDim || heads % kv.kv_heads != 0)
    fail_cuda("draft_attention", "head_dim a multiple of 32 up to 128, heads a multiple of kv_heads", __FILE__,
              __LINE__);
  const bf16* q_in = static_cast<const bf16*>(q);
  bf16* o = static_cast<bf16*>(out);
  if (kv.head_dim == 64 && launch_attention_for_group<64>(stream, q_in, heads, scale, kv, rows, o)) return;
  if (kv.head_dim == 128 && launch_attention_for_group<128>(stream, q_in, heads, scale, kv, rows, o)) return;
  MOESERVE_CUDA_CHECK(cuda_launch(attention_any_shape_kernel, dim3(rows.rows, heads), kAnyShapeWarps * 32, 0, stream,
                                  q_in, heads, scale, kv, rows, o));
}

void launch_silu_mul(cudaStream_t stream, const float* gate_up, int rows, int64_t I, void* out) {
  if (rows == 0) return;
  MOESERVE_CUDA_CHECK(
      cuda_launch(silu_mul_kernel, grid_for(rows * I), kThreads, 0, stream, gate_up, rows, I, static_cast<bf16*>(out)));
}

void launch_to_bf16(cudaStream_t stream, const float* x, int64_t n, void* out) {
  if (n == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(to_bf16_kernel, grid_for(n), kThreads, 0, stream, x, n, static_cast<bf16*>(out)));
}

void launch_draft_tokens(cudaStream_t stream, const int32_t* draft_ids, const int32_t* d2t, int rows, int k,
                         int depth, int32_t* next_tokens, int32_t* drafted) {
  if (rows == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(draft_tokens_kernel, (rows + 127) / 128, 128, 0, stream, draft_ids, d2t, rows, k,
                                  depth, next_tokens, drafted));
}

void launch_top_k_log_probs(cudaStream_t stream, const float* logits, int rows, int V, int k, float* log_probs,
                            int32_t* ids) {
  if (rows == 0) return;
  if (k < 1 || k > kMaxDraftTopK || k > V) fail_cuda("top_k_log_probs", "k must be in [1, 32] and <= V", __FILE__, __LINE__);
  MOESERVE_CUDA_CHECK(cuda_launch(top_k_log_probs_kernel, rows, kThreads, 0, stream, logits, V, k, log_probs, ids));
}

}  // namespace moeserve::cuda
