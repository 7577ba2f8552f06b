// YaRN RoPE (half split: pairs (i, i + head_dim/2), cos and sin scaled by the concentration) applied to the q
// and k heads of the fused QKV projection; q goes to its own buffer, k and v into the paged KV cache at each
// token's KV slot (its position, except in a tree step: token_slot). One thread per rotary pair of a head; grid
// (token, pair group).
// CPU reference: cpu::apply_rope (fp32 angle position * inv_freq, as transformers computes it).
#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {
namespace {

template <typename Elem>
__global__ void rope_kv_write_kernel(RopeParams p, StepView step) {
  const int t = blockIdx.x;
  const int position = step.positions[t];
  const int seq = step.token_seq[t];
  const int kv_slot = token_slot(step, t, seq);
  const int D = p.head_dim, half = D / 2;
  const int all_heads = p.heads + 2 * p.kv_heads;
  const float* row = p.qkv + static_cast<int64_t>(t) * all_heads * D;
  Elem* cache = static_cast<Elem*>(p.kv.base);
  const int item = blockIdx.y * blockDim.x + threadIdx.x;
  if (item < all_heads * half) {
    const int h = item / half, i = item % half;
    const float x1 = row[h * D + i], x2 = row[h * D + i + half];
    float out1 = x1, out2 = x2;
    if (h < p.heads + p.kv_heads) {
      float sine, cosine;
      sincosf(static_cast<float>(position) * p.inv_freq[i], &sine, &cosine);
      cosine *= p.concentration;
      sine *= p.concentration;
      out1 = x1 * cosine - x2 * sine;
      out2 = x2 * cosine + x1 * sine;
    }
    Elem* dst;
    if (h < p.heads) {
      dst = static_cast<Elem*>(p.q_out) + (static_cast<int64_t>(t) * p.heads + h) * D;
    } else {
      const int which = h < p.heads + p.kv_heads ? 0 : 1;
      const int kv_head = h - p.heads - which * p.kv_heads;
      const int64_t offset = kv_offset(p.kv, step, seq, p.group, p.slot, which, kv_head, kv_slot);
      if (offset < 0) return;  // the host checked every written slot has a block
      dst = cache + offset;
    }
    dst[i] = from_float<Elem>(out1);
    dst[i + half] = from_float<Elem>(out2);
  }
}

}  // namespace

void launch_rope_kv_write(cudaStream_t stream, Precision type, const RopeParams& params, const StepView& step) {
  if (step.num_tokens == 0) return;
  const dim3 grid(step.num_tokens, ceil_div((params.heads + 2 * params.kv_heads) * params.head_dim / 2, 256));
  if (type == Precision::bf16)
    rope_kv_write_kernel<bf16><<<grid, 256, 0, stream>>>(params, step);
  else
    rope_kv_write_kernel<float><<<grid, 256, 0, stream>>>(params, step);
  MOESERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace moeserve::cuda
