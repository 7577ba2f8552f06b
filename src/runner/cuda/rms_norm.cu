// Residual add fused with RMSNorm: x += delta (the attention projection) or x += the weighted sum of the token's
// expert outputs (the MoE combine), then out = x / sqrt(mean(x^2) + eps) * scale in fp32, written in the
// precision of the next matrix product. One block per token. The combine alone (launch_moe_combine) is a
// tensor-parallel rank's: it sums its own rows per token before the ranks sum those sums.
// CPU reference: cpu::rms_norm, and CpuRunner's residual adds (the combine sums slots in order, then adds).
#include <algorithm>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

enum class Delta { none, dense, experts };

// A row is read once as float4s into registers (up to kMaxVectors per thread) and written from there.
// Version 1 looped over the row with 256 threads twice (a dependent chain of ~11 loads per pass): ~17 us per
// token row under ncu at batch 1. Version 2: one float4 per thread for hidden 2880 (736 threads).
constexpr int kMaxVectors = 4;

__device__ __forceinline__ float4 operator+(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float4 scaled(float4 a, float w) { return make_float4(w * a.x, w * a.y, w * a.z, w * a.w); }

__device__ __forceinline__ void store4(float* out, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(out) = make_float4(a, b, c, d);
}
__device__ __forceinline__ void store4(bf16* out, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(a, b), pack_bf16x2(c, d));
}

// The weighted sum of token t's expert outputs, float4 i of its row: the slots in order, from zero.
__device__ __forceinline__ float4 combined_experts(const ExpertCombine& combine, int64_t t, int i, int H) {
  float4 combined = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int k = 0; k < combine.top_k; ++k) {
    const int64_t slot = t * combine.top_k + k;
    const int row = combine.slot_row[slot];
    if (row < 0) continue;  // another expert-parallel rank's expert
    const float4 y = reinterpret_cast<const float4*>(combine.y + static_cast<int64_t>(row) * H)[i];
    combined = combined + scaled(y, combine.weights[slot]);
  }
  return combined;
}

template <typename Out, Delta kDelta>
__global__ void add_rms_norm_kernel(float* x, const float* delta, ExpertCombine combine, const float* scale, int H,
                                    float eps, Out* out) {
  pdl_prologue();
  const int64_t t = blockIdx.x;
  float4* row = reinterpret_cast<float4*>(x + t * H);
  const int vectors = H / 4;
  float4 v[kMaxVectors];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVectors; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= vectors) break;
    float4 a = row[i];
    if constexpr (kDelta == Delta::dense) a = a + reinterpret_cast<const float4*>(delta + t * H)[i];
    if constexpr (kDelta == Delta::experts) a = a + combined_experts(combine, t, i, H);
    if constexpr (kDelta != Delta::none) row[i] = a;
    sum += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
    v[j] = a;
  }
  sum = block_sum(sum);
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(H) + eps);
  const float4* scale4 = reinterpret_cast<const float4*>(scale);
#pragma unroll
  for (int j = 0; j < kMaxVectors; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i >= vectors) break;
    const float4 s = scale4[i];
    store4(out + t * H + 4 * i, v[j].x * inv * s.x, v[j].y * inv * s.y, v[j].z * inv * s.z, v[j].w * inv * s.w);
  }
}

__global__ void moe_combine_kernel(ExpertCombine combine, int H, float* out) {
  pdl_prologue();
  const int64_t t = blockIdx.x;
  float4* row = reinterpret_cast<float4*>(out + t * H);
  for (int i = threadIdx.x; i < H / 4; i += blockDim.x) row[i] = combined_experts(combine, t, i, H);
}

int threads_for(int H) { return std::clamp((H / 4 + 31) / 32 * 32, 32, 1024); }

template <typename Out>
void launch_typed(cudaStream_t stream, float* x, const float* delta, const ExpertCombine* combine, const float* scale,
                  int T, int H, float eps, Out* out) {
  const ExpertCombine none{};
  // One float4 per thread up to 1024 threads, then up to kMaxVectors each.
  const int threads = threads_for(H);
  if (delta != nullptr)
    MOESERVE_CUDA_CHECK(
        cuda_launch(add_rms_norm_kernel<Out, Delta::dense>, T, threads, 0, stream, x, delta, none, scale, H, eps, out));
  else if (combine != nullptr)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::experts>, T, threads, 0, stream, x, nullptr,
                                    *combine, scale, H, eps, out));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::none>, T, threads, 0, stream, x, nullptr, none,
                                    scale, H, eps, out));
}

}  // namespace

void launch_add_rms_norm(cudaStream_t stream, Precision out_type, float* x, const float* delta,
                         const ExpertCombine* combine, const float* scale, int T, int H, float eps, void* out) {
  if (T == 0) return;
  if (H % 4 != 0 || H / 4 > kMaxVectors * 1024)
    fail_cuda("add_rms_norm", "hidden size must be a multiple of 4 and at most 16384", __FILE__, __LINE__);
  if (out_type == Precision::bf16)
    launch_typed(stream, x, delta, combine, scale, T, H, eps, static_cast<bf16*>(out));
  else
    launch_typed(stream, x, delta, combine, scale, T, H, eps, static_cast<float*>(out));
}

void launch_moe_combine(cudaStream_t stream, const ExpertCombine& combine, int T, int H, float* out) {
  if (T == 0) return;
  if (H % 4 != 0) fail_cuda("moe_combine", "hidden size must be a multiple of 4", __FILE__, __LINE__);
  MOESERVE_CUDA_CHECK(cuda_launch(moe_combine_kernel, T, threads_for(H), 0, stream, combine, H, out));
}

}  // namespace moeserve::cuda
