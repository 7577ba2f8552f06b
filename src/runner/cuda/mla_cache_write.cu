// A step's latents into the paged MLA cache (mla_layout.h): one block per token normalises the latent part of
// its kv_a projection (RMSNorm with kv_a_layernorm's weights), rotates the k_pe part in adjacent pairs at the
// token's position (DeepSeek's YaRN inverse frequencies and attention factor, as cpu::rope_adjacent_pairs: fp32
// angle, cos and sin times the factor) and stores the row as the cache's type at the token's slot.
// CPU reference: cpu::MlaAttention::forward's latent writes (cpu::rms_norm, then cpu::rope_adjacent_pairs).
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = 128;

template <typename Elem>
__global__ void __launch_bounds__(kThreads) mla_cache_write_kernel(MlaCacheWriteParams p, StepView step) {
  pdl_prologue();
  const int t = blockIdx.x;
  const int seq = step.token_seq[t];
  const MlaCacheShape& shape = p.cache.shape;
  const int L = shape.kv_lora_rank, R = shape.rope_dim;
  const int64_t offset =
      mla_position_offset(shape, step_block_table(step, seq, p.group), p.layer, token_slot(step, t, seq));
  const float* x = p.kv_a + static_cast<int64_t>(t) * (L + R);
  // As cpu::rms_norm: the mean of squares in fp32, 1 / sqrt(mean + eps), x * inv * weight.
  float sum = 0.0f;
  for (int i = threadIdx.x; i < L; i += kThreads) sum += x[i] * x[i];
  sum = block_sum(sum);
  if (offset < 0) return;  // no block at the slot (the block tables never give back a latent block)
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(L) + p.eps);
  const float inv_scale = 1.0f / p.scale;
  Elem* row = static_cast<Elem*>(p.cache.base) + offset;
  for (int i = threadIdx.x; i < L; i += kThreads) store_kv(row + i, x[i] * inv * p.norm_weight[i], inv_scale);
  const float position = static_cast<float>(step.positions[t]);
  for (int j = threadIdx.x; j < R / 2; j += kThreads) {
    const float angle = position * p.inv_freq[j];
    const float c = cosf(angle) * p.rope_factor, s = sinf(angle) * p.rope_factor;
    const float x0 = x[L + 2 * j], x1 = x[L + 2 * j + 1];
    store_kv(row + L + 2 * j, x0 * c - x1 * s, inv_scale);
    store_kv(row + L + 2 * j + 1, x1 * c + x0 * s, inv_scale);
  }
}

}  // namespace

void launch_mla_cache_write(cudaStream_t stream, const MlaCacheWriteParams& params, const StepView& step) {
  if (step.num_tokens == 0) return;
  const MlaCacheShape& s = params.cache.shape;
  if (s.kv_lora_rank <= 0 || s.rope_dim <= 0 || s.rope_dim % 2 != 0 || s.block_size <= 0 || s.layers <= 0)
    fail_cuda("mla_cache_write", "kv_lora_rank, block_size and layers must be positive, rope_dim positive and even",
              __FILE__, __LINE__);
  switch (params.cache.dtype) {
    case KvDtype::f32:
      MOESERVE_CUDA_CHECK(
          cuda_launch(mla_cache_write_kernel<float>, step.num_tokens, kThreads, 0, stream, params, step));
      break;
    case KvDtype::bf16:
      MOESERVE_CUDA_CHECK(
          cuda_launch(mla_cache_write_kernel<bf16>, step.num_tokens, kThreads, 0, stream, params, step));
      break;
    case KvDtype::fp8_e4m3:
      MOESERVE_CUDA_CHECK(cuda_launch(mla_cache_write_kernel<fp8>, step.num_tokens, kThreads, 0, stream, params, step));
      break;
  }
}

}  // namespace moeserve::cuda
