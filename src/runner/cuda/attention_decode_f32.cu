// The fp32 precision path's attention of query tokens over the paged KV cache, with sinks and sliding windows
// (flash-decoding without tensor cores; the bf16 path's decode attention is attention_decode.cu).
// Grid: (query token, KV head, key split). A block loads the q vectors of the KV head's query heads (GQA: every
// key and value loaded is used by all of them), each warp walks its keys one per lane with an online softmax in
// the log2 domain, the warps merge in shared memory and write a partial (max, sum, output) per split; the
// combine kernel merges the splits and the sink: o = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink - m)).
// Any query token works (a prefill chunk too), so this is all of the fp32 path's attention. In a tree step a
// query walks the slots from its window's start to its own slot, and the step's keys among them pass its tree
// mask. Version 1 read each value row per output lane inside a 32-step loop (dependent loads; 0.64 TB/s of KV at
// batch 64 under ncu) and merged splits one load at a time. Version 2: each lane copies its own key's value row
// to shared memory with its key row, and the combine weighs all splits at once. Version 2 was also the bf16
// path's decode attention until attention_decode.cu's tensor-core kernel replaced it there.
// head_dim must be 64 (lane l owns output dims 2l, 2l+1).
// CPU reference: cpu::attend_one_head.
#include <algorithm>
#include <cmath>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kHeadDim = kAttentionHeadDim;
constexpr int kWarps = 4;
using Elem = float;

__device__ __forceinline__ void load_row(const float* src, float (&out)[kHeadDim]) {
  const float4* v = reinterpret_cast<const float4*>(src);
#pragma unroll
  for (int i = 0; i < kHeadDim / 4; ++i) {
    const float4 chunk = v[i];
    out[4 * i] = chunk.x;
    out[4 * i + 1] = chunk.y;
    out[4 * i + 2] = chunk.z;
    out[4 * i + 3] = chunk.w;
  }
}

__device__ __forceinline__ float2 load_pair(const float* src) { return *reinterpret_cast<const float2*>(src); }

template <int kPerKv>
__global__ void __launch_bounds__(kWarps * 32) attention_decode_kernel(AttentionParams p, StepView step, int splits,
                                                                      float* partial) {
  pdl_prologue();
  const int t = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seq = step.token_seq[t];
  const int position = step.positions[t];
  const int last = token_slot(step, t, seq);  // the query's own slot (its position outside tree steps)
  const int start_position = step.seq_context[seq] - step.seq_q_len[seq];
  const uint64_t mask = tree_mask(step, t, p.window > 0);
  const int lo = p.window > 0 ? max(0, position - p.window + 1) : 0;
  const int keys = last - lo + 1;
  const int chunk = (keys + splits - 1) / splits;
  const int k0 = lo + split * chunk;
  const int k1 = min(last + 1, k0 + chunk);

  __shared__ float q_s[kPerKv][kHeadDim];
  const float q_scale = p.scale * kLog2e;
  const Elem* q = static_cast<const Elem*>(p.q) + (static_cast<int64_t>(t) * p.heads + kv_head * kPerKv) * kHeadDim;
  for (int i = threadIdx.x; i < kPerKv * kHeadDim; i += blockDim.x) q_s[i / kHeadDim][i % kHeadDim] = to_float(q[i]) * q_scale;
  __syncthreads();

  float m[kPerKv], l[kPerKv], o[kPerKv][2];
#pragma unroll
  for (int h = 0; h < kPerKv; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
    o[h][0] = o[h][1] = 0.0f;
  }
  const Elem* cache = static_cast<const Elem*>(p.kv.base);
  const int64_t v_minus_k = static_cast<int64_t>(p.kv.kv_heads) * p.kv.block_size * kHeadDim;
  constexpr int kRowVectors = kHeadDim * sizeof(Elem) / 16;
  __shared__ __align__(16) Elem v_s[kWarps][32][kHeadDim];  // this warp's 32 value rows, one per lane's key
  for (int base = k0 + warp * 32; base < k1; base += kWarps * 32) {
    const int key = base + lane;
    const bool visible = key < k1 && tree_visible(mask, key, start_position);
    const int64_t k_offset = visible ? kv_offset(p.kv, step, seq, p.group, p.slot, 0, kv_head, key) : -1;
    const bool valid = k_offset >= 0;
    const unsigned valid_lanes = __ballot_sync(0xffffffffu, valid);
    float s[kPerKv];
    if (valid) {
      // The key's value row goes to shared memory (read back per output dimension below); its loads are in
      // flight with the key's.
      const uint4* v_row = reinterpret_cast<const uint4*>(cache + k_offset + v_minus_k);
      uint4* v_dst = reinterpret_cast<uint4*>(v_s[warp][lane]);
#pragma unroll
      for (int i = 0; i < kRowVectors; ++i) v_dst[i] = v_row[i];
      float k_row[kHeadDim];
      load_row(cache + k_offset, k_row);
#pragma unroll
      for (int h = 0; h < kPerKv; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < kHeadDim; ++d) dot += q_s[h][d] * k_row[d];
        s[h] = dot;
      }
    }
    float prob[kPerKv];
#pragma unroll
    for (int h = 0; h < kPerKv; ++h) {
      const float m_new = fmaxf(m[h], warp_max(valid ? s[h] : -INFINITY));
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
      prob[h] = valid ? exp2f(s[h] - m_new) : 0.0f;
      l[h] = l[h] * alpha + warp_sum(prob[h]);
      o[h][0] *= alpha;
      o[h][1] *= alpha;
      m[h] = m_new;
    }
    __syncwarp();
    const int count = min(32, k1 - base);
    for (int j = 0; j < count; ++j) {
      if (((valid_lanes >> j) & 1u) == 0) continue;  // no value row (probability 0); warp-uniform
      const float2 v = load_pair(&v_s[warp][j][2 * lane]);
#pragma unroll
      for (int h = 0; h < kPerKv; ++h) {
        const float pj = __shfl_sync(0xffffffffu, prob[h], j);
        o[h][0] += pj * v.x;
        o[h][1] += pj * v.y;
      }
    }
    __syncwarp();  // v_s is rewritten by the next iteration
  }

  __shared__ float m_s[kWarps][kPerKv], l_s[kWarps][kPerKv], o_s[kWarps][kPerKv][kHeadDim];
#pragma unroll
  for (int h = 0; h < kPerKv; ++h) {
    if (lane == 0) {
      m_s[warp][h] = m[h];
      l_s[warp][h] = l[h];
    }
    o_s[warp][h][2 * lane] = o[h][0];
    o_s[warp][h][2 * lane + 1] = o[h][1];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kPerKv * kHeadDim; i += blockDim.x) {
    const int h = i / kHeadDim, d = i % kHeadDim;
    float max_all = -INFINITY;
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, m_s[w][h]);
    float sum = 0.0f, out = 0.0f;
    if (max_all != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(m_s[w][h] - max_all);
        sum += l_s[w][h] * f;
        out += o_s[w][h][d] * f;
      }
    }
    float* part = partial + ((static_cast<int64_t>(t) * p.heads + kv_head * kPerKv + h) * splits + split) * (kHeadDim + 2);
    if (d == 0) {
      part[0] = max_all;
      part[1] = sum;
    }
    part[2 + d] = out;
  }
}

// One block of head_dim threads per (token, head); the first warp turns the splits' (max, sum) pairs and the sink
// into one weight per split (splits <= 32), then every thread sums its dimension.
__global__ void attention_combine_kernel(AttentionParams p, int splits, const float* partial) {
  pdl_prologue();
  const int t = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const float* part = partial + (static_cast<int64_t>(t) * p.heads + head) * splits * (kHeadDim + 2);
  __shared__ float weight[32];
  if (threadIdx.x < 32) {
    const int s = threadIdx.x;
    const float m = s < splits ? part[s * (kHeadDim + 2)] : -INFINITY;
    const float l = s < splits ? part[s * (kHeadDim + 2) + 1] : 0.0f;
    const float sink = p.sinks[head] * kLog2e;
    const float max_all = fmaxf(sink, warp_max(m));
    const float f = exp2f(m - max_all);
    const float sum = warp_sum(l * f) + exp2f(sink - max_all);
    weight[s] = f / sum;
  }
  __syncthreads();
  float out = 0.0f;
  for (int s = 0; s < splits; ++s) out += part[s * (kHeadDim + 2) + 2 + d] * weight[s];
  static_cast<Elem*>(p.out)[(static_cast<int64_t>(t) * p.heads + head) * kHeadDim + d] = out;
}

template <int kPerKv>
void launch_typed(cudaStream_t stream, const AttentionParams& p, const StepView& step, int splits, float* partial) {
  const dim3 grid(step.num_tokens, p.kv_heads, splits);
  MOESERVE_CUDA_CHECK(
      cuda_launch(attention_decode_kernel<kPerKv>, grid, kWarps * 32, 0, stream, p, step, splits, partial));
  MOESERVE_CUDA_CHECK(
      cuda_launch(attention_combine_kernel, dim3(step.num_tokens, p.heads), kHeadDim, 0, stream, p, splits, partial));
}

void launch_for_group_size(cudaStream_t stream, const AttentionParams& p, const StepView& step, int splits,
                           float* partial) {
  switch (p.heads / p.kv_heads) {
    case 1: return launch_typed<1>(stream, p, step, splits, partial);
    case 2: return launch_typed<2>(stream, p, step, splits, partial);
    case 4: return launch_typed<4>(stream, p, step, splits, partial);
    case 8: return launch_typed<8>(stream, p, step, splits, partial);
    default: fail_cuda("attention_decode", "query heads per KV head must be 1, 2, 4 or 8", __FILE__, __LINE__);
  }
}

}  // namespace

// Enough blocks for four per multiprocessor, at most 32 splits (the combine's one warp).
int attention_decode_f32_splits(int T, int kv_heads, int multiprocessors) {
  const int blocks = T * kv_heads;
  return std::max(1, std::min(32, (4 * multiprocessors + blocks - 1) / blocks));
}

void launch_attention_decode_f32(cudaStream_t stream, const AttentionParams& params, const StepView& step, int splits,
                                 float* partial) {
  if (step.num_tokens == 0) return;
  if (params.head_dim != kHeadDim) fail_cuda("attention_decode_f32", "head_dim must be 64", __FILE__, __LINE__);
  if (params.kv.dtype != KvDtype::f32) fail_cuda("attention_decode_f32", "the KV cache must be f32", __FILE__, __LINE__);
  launch_for_group_size(stream, params, step, splits, partial);
}

}  // namespace moeserve::cuda
