// Residual add fused with RMSNorm: x += delta (the attention projection) or x += the weighted sum of the token's
// expert outputs (the MoE combine), then out = x / sqrt(mean(x^2) + eps) * scale in fp32, written in the
// precision of the next matrix product. One block per token; each thread re-reads only the elements it wrote.
// CPU reference: cpu::rms_norm, and CpuRunner's residual adds (the combine sums slots in order, then adds).
#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {
namespace {

enum class Delta { none, dense, experts };

template <typename Out, Delta kDelta>
__global__ void add_rms_norm_kernel(float* x, const float* delta, ExpertCombine combine, const float* scale, int H,
                                    float eps, Out* out) {
  const int64_t t = blockIdx.x;
  float* row = x + t * H;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v = row[i];
    if constexpr (kDelta == Delta::dense) v += delta[t * H + i];
    if constexpr (kDelta == Delta::experts) {
      float combined = 0.0f;
      for (int j = 0; j < combine.top_k; ++j) {
        const int64_t slot = t * combine.top_k + j;
        combined += combine.weights[slot] * combine.y[static_cast<int64_t>(combine.slot_row[slot]) * H + i];
      }
      v += combined;
    }
    if constexpr (kDelta != Delta::none) row[i] = v;
    sum += v * v;
  }
  sum = block_sum(sum);
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(H) + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[t * H + i] = from_float<Out>(row[i] * inv * scale[i]);
}

template <typename Out>
void launch_typed(cudaStream_t stream, float* x, const float* delta, const ExpertCombine* combine, const float* scale,
                  int T, int H, float eps, Out* out) {
  const ExpertCombine none{};
  if (delta != nullptr)
    add_rms_norm_kernel<Out, Delta::dense><<<T, 256, 0, stream>>>(x, delta, none, scale, H, eps, out);
  else if (combine != nullptr)
    add_rms_norm_kernel<Out, Delta::experts><<<T, 256, 0, stream>>>(x, nullptr, *combine, scale, H, eps, out);
  else
    add_rms_norm_kernel<Out, Delta::none><<<T, 256, 0, stream>>>(x, nullptr, none, scale, H, eps, out);
}

}  // namespace

void launch_add_rms_norm(cudaStream_t stream, Precision out_type, float* x, const float* delta,
                         const ExpertCombine* combine, const float* scale, int T, int H, float eps, void* out) {
  if (T == 0) return;
  if (out_type == Precision::bf16)
    launch_typed(stream, x, delta, combine, scale, T, H, eps, static_cast<bf16*>(out));
  else
    launch_typed(stream, x, delta, combine, scale, T, H, eps, static_cast<float*>(out));
  MOESERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace moeserve::cuda
