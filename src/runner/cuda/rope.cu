// YaRN RoPE (half split: pairs (i, i + head_dim/2), cos and sin scaled by the concentration) applied to the q
// and k heads of the fused QKV projection; q goes to its own buffer, k and v into the paged KV cache at each
// token's KV slot (its position, except in a tree step: token_slot), as the cache's element type (fp8: divided
// by the layer's K or V scale). One thread per rotary pair of a head; grid (token, pair group).
// CPU reference: cpu::apply_rope (fp32 angle position * inv_freq, as transformers computes it).
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

template <typename Elem, typename KvElem>
__global__ void rope_kv_write_kernel(RopeParams p, StepView step) {
  pdl_prologue();
  const int t = blockIdx.x;
  const int position = step.positions[t];
  const int seq = step.token_seq[t];
  const int kv_slot = token_slot(step, t, seq);
  const int D = p.head_dim, half = D / 2;
  const int all_heads = p.heads + 2 * p.kv_heads;
  const float* row = p.qkv + static_cast<int64_t>(t) * all_heads * D;
  KvElem* cache = static_cast<KvElem*>(p.kv.base);
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
    if (h < p.heads) {
      Elem* dst = static_cast<Elem*>(p.q_out) + (static_cast<int64_t>(t) * p.heads + h) * D;
      dst[i] = from_float<Elem>(out1);
      dst[i + half] = from_float<Elem>(out2);
    } else {
      const int which = h < p.heads + p.kv_heads ? 0 : 1;
      const int kv_head = h - p.heads - which * p.kv_heads;
      const int64_t offset = kv_offset(p.kv, step, seq, p.group, p.slot, which, kv_head, kv_slot);
      if (offset < 0) return;  // the host checked every written slot has a block
      const float inv_scale = 1.0f / (which == 0 ? p.k_scale : p.v_scale);
      store_kv(cache + offset + i, out1, inv_scale);
      store_kv(cache + offset + i + half, out2, inv_scale);
    }
  }
}

}  // namespace

void launch_rope_kv_write(cudaStream_t stream, Precision type, const RopeParams& params, const StepView& step) {
  if (step.num_tokens == 0) return;
  const dim3 grid(step.num_tokens, ceil_div((params.heads + 2 * params.kv_heads) * params.head_dim / 2, 256));
  const KvDtype kv = params.kv.dtype;
  if (type == Precision::f32 && kv == KvDtype::f32)
    MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_kernel<float, float>, grid, 256, 0, stream, params, step));
  else if (type == Precision::bf16 && kv == KvDtype::bf16)
    MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_kernel<bf16, bf16>, grid, 256, 0, stream, params, step));
  else if (type == Precision::bf16 && kv == KvDtype::fp8_e4m3)
    MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_kernel<bf16, fp8>, grid, 256, 0, stream, params, step));
  else
    fail_cuda("rope_kv_write", "KV cache type does not go with the precision (f32: f32; bf16: bf16 or fp8)", __FILE__,
              __LINE__);
}

}  // namespace moeserve::cuda
