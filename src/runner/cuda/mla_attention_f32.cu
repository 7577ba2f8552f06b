// Absorbed MLA over an fp32 latent cache (deepseek_kernels.h): the fp32 path's attention, where launch_mla_decode
// reads bf16 and fp8 caches only. Plain and fp32 throughout, for matching the CPU reference to rounding.
// One block of 128 threads per (query token, head) walks the positions 0 .. its own in chunks of 32 keys: a warp
// per key takes the score scale * (q~ . c + q_pe . k_pe) (lanes over the row, a warp sum), then every thread
// updates the running maximum, sum and its own output columns (online softmax: the earlier sums rescaled by
// exp(m_old - m_new)); o~ = the sums over the weights. Each latent row is read once per (token, head): 128 times
// for DeepSeek-V3's heads, where launch_mla_decode reads it once per token.
// CPU reference: cpu::MlaAttention's absorbed form (attend_absorbed), between its two projections.
#include <cmath>

#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/mla_decode.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kKeys = 32;         // keys per chunk
constexpr int kMaxColumns = 8;    // output columns a thread: kv_lora_rank up to 1,024

__global__ void __launch_bounds__(kThreads) mla_attention_f32_kernel(MlaDecodeParams p, StepView step) {
  pdl_prologue();
  __shared__ float scores[kKeys];
  const int t = blockIdx.x, head = blockIdx.y;
  const MlaCacheShape shape = p.cache.shape;
  const int L = shape.kv_lora_rank, R = shape.rope_dim;
  const int last = mla_last_position(step, t);
  const int32_t* table = step_block_table(step, step.token_seq[t], p.group);
  const int64_t query = static_cast<int64_t>(t) * p.heads + head;
  const float* q_latent = p.q_latent + query * L;
  const float* q_rope = p.q_rope + query * R;
  const float* cache = static_cast<const float*>(p.cache.base);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  float m = -INFINITY, sum = 0.0f;
  float acc[kMaxColumns] = {};
  for (int k0 = 0; k0 <= last; k0 += kKeys) {
    const int n = min(kKeys, last + 1 - k0);
    __syncthreads();  // the previous chunk's scores are read
    for (int j = warp; j < n; j += kThreads / 32) {
      const int64_t at = mla_position_offset(shape, table, p.layer, k0 + j);
      float latent = 0.0f, rope = 0.0f;
      if (at >= 0) {
        for (int i = lane; i < L; i += 32) latent = fmaf(q_latent[i], cache[at + i], latent);
        for (int i = lane; i < R; i += 32) rope = fmaf(q_rope[i], cache[at + L + i], rope);
      }
      latent = warp_sum(latent);
      rope = warp_sum(rope);
      if (lane == 0) scores[j] = at >= 0 ? (latent + rope) * p.scale : -INFINITY;
    }
    __syncthreads();
    float chunk_max = -INFINITY;
    for (int j = 0; j < n; ++j) chunk_max = fmaxf(chunk_max, scores[j]);
    const float m_new = fmaxf(m, chunk_max);
    const float rescale = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    sum *= rescale;
#pragma unroll
    for (int c = 0; c < kMaxColumns; ++c) acc[c] *= rescale;
    for (int j = 0; j < n; ++j) {
      const int64_t at = mla_position_offset(shape, table, p.layer, k0 + j);
      if (at < 0) continue;
      const float weight = expf(scores[j] - m_new);
      sum += weight;
#pragma unroll
      for (int c = 0; c < kMaxColumns; ++c) {
        const int column = threadIdx.x + c * kThreads;
        if (column < L) acc[c] = fmaf(weight, cache[at + column], acc[c]);
      }
    }
    m = m_new;
  }
  float* out = p.out + query * L;
#pragma unroll
  for (int c = 0; c < kMaxColumns; ++c) {
    const int column = threadIdx.x + c * kThreads;
    if (column < L) out[column] = acc[c] / sum;
  }
}

}  // namespace

void launch_mla_attention_f32(cudaStream_t stream, const MlaDecodeParams& params, const StepView& step) {
  if (step.num_tokens == 0) return;
  if (step.tree_masks != nullptr) fail_cuda("mla_attention_f32", "tree steps are not supported", __FILE__, __LINE__);
  if (params.cache.dtype != KvDtype::f32)
    fail_cuda("mla_attention_f32", "the latent cache must be f32 (launch_mla_decode reads bf16 and fp8)", __FILE__,
              __LINE__);
  const MlaCacheShape& s = params.cache.shape;
  if (s.kv_lora_rank <= 0 || s.kv_lora_rank > kMaxColumns * kThreads || s.rope_dim <= 0 || s.block_size <= 0 ||
      s.layers <= 0 || params.heads <= 0)
    fail_cuda("mla_attention_f32", "kv_lora_rank must be 1 to 1,024; rope_dim, block_size, layers and heads positive",
              __FILE__, __LINE__);
  MOESERVE_CUDA_CHECK(cuda_launch(mla_attention_f32_kernel, dim3(step.num_tokens, params.heads), kThreads, 0, stream,
                                  params, step));
}

}  // namespace moeserve::cuda
