// Residual add fused with RMSNorm: x += delta (the attention projection) or x += the weighted sum of the token's
// expert outputs (the MoE combine), then out = x / sqrt(mean(x^2) + eps) * scale in fp32, written in the
// precision of the next matrix product, or quantised for an FP8 one (e4m3 with a scale a token a 128 columns:
// launch_add_rms_norm_e4m3). One block per token. The combine alone (launch_moe_combine) is a
// tensor-parallel rank's: it sums its own rows per token before the ranks sum those sums.
// CPU reference: cpu::rms_norm, and CpuRunner's residual adds (the combine sums slots in order, then adds).
#include <cuda_fp8.h>

#include <algorithm>

#include "runner/cuda/dense_gemv.cuh"
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

// dense_l2: a dense delta written by other blocks of the same launch, read through L2 (ld.cg).
// dense_bias: a dense delta plus a bias vector (the FP8 output projection's, added here instead of its epilogue).
enum class Delta { none, dense, dense_bias, dense_l2, experts };

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

// The weighted sum of token t's expert outputs, float4 i of its row: the slots in order, from zero. With kTopK > 0
// (the launch's top_k: gpt-oss 4, DeepSeek-V3 8) every slot's index, weight and row is loaded before any sum, so a
// thread keeps kTopK row loads in flight at once (version 2 walked the slots one dependent load after another: the
// prefill step's combine ran at 60% of the copy rate, step_breakdown on an H100); the sums are the same, in order.
// kBf16Y: the rows are combine.y_bf16's (MoeGemmParams::out_bf16), else combine.y's.
template <bool kBf16Y>
__device__ __forceinline__ float4 expert_row4(const ExpertCombine& combine, int row, int i, int H) {
  if constexpr (kBf16Y) {
    const uint2 v = reinterpret_cast<const uint2*>(static_cast<const bf16*>(combine.y_bf16) + static_cast<int64_t>(row) * H)[i];
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
    return make_float4(a.x, a.y, b.x, b.y);
  } else {
    return reinterpret_cast<const float4*>(combine.y + static_cast<int64_t>(row) * H)[i];
  }
}

template <int kTopK, bool kBf16Y = false>
__device__ __forceinline__ float4 combined_experts(const ExpertCombine& combine, int64_t t, int i, int H) {
  float4 combined = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if constexpr (kTopK > 0) {
    int rows[kTopK];
    float weights[kTopK];
    float4 y[kTopK];
#pragma unroll
    for (int k = 0; k < kTopK; ++k) {
      rows[k] = combine.slot_row[t * kTopK + k];
      weights[k] = combine.weights[t * kTopK + k];
    }
#pragma unroll
    for (int k = 0; k < kTopK; ++k)
      if (rows[k] >= 0) y[k] = expert_row4<kBf16Y>(combine, rows[k], i, H);
#pragma unroll
    for (int k = 0; k < kTopK; ++k)
      if (rows[k] >= 0) combined = combined + scaled(y[k], weights[k]);  // < 0: another expert-parallel rank's expert
    return combined;
  }
  for (int k = 0; k < combine.top_k; ++k) {
    const int64_t slot = t * combine.top_k + k;
    const int row = combine.slot_row[slot];
    if (row < 0) continue;  // another expert-parallel rank's expert
    const float4 y = expert_row4<kBf16Y>(combine, row, i, H);
    combined = combined + scaled(y, combine.weights[slot]);
  }
  return combined;
}

// The pieces of one token row's add + RMSNorm as thread vt of `threads` does them (add_rms_norm_kernel: a block's
// threads; the fused o-projection below: virtual threads of that very layout, so the sums are the same bits).
// First: float4s vt, vt + threads, ... of row get their delta added (and stored back), kept in v; returns the sum of
// their squares.
template <Delta kDelta, int kTopK = 0, bool kBf16Y = false>
__device__ __forceinline__ float add_row_part(float4* row, const float* delta, const float* bias,
                                              const ExpertCombine& combine, int64_t t,
                                              int H, int vt, int threads, float4 (&v)[kMaxVectors]) {
  const int vectors = H / 4;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVectors; ++j) {
    const int i = vt + j * threads;
    if (i >= vectors) break;
    float4 a = row[i];
    if constexpr (kDelta == Delta::dense) a = a + reinterpret_cast<const float4*>(delta + t * H)[i];
    if constexpr (kDelta == Delta::dense_bias)
      a = a + (reinterpret_cast<const float4*>(delta + t * H)[i] + reinterpret_cast<const float4*>(bias)[i]);
    if constexpr (kDelta == Delta::dense_l2) a = a + __ldcg(reinterpret_cast<const float4*>(delta + t * H) + i);
    if constexpr (kDelta == Delta::experts) a = a + combined_experts<kTopK, kBf16Y>(combine, t, i, H);
    if constexpr (kDelta != Delta::none) row[i] = a;
    sum += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
    v[j] = a;
  }
  return sum;
}

// Then: the same float4s, normalised by the row's inverse RMS and scaled, into out.
template <typename Out>
__device__ __forceinline__ void norm_row_part(const float4 (&v)[kMaxVectors], float inv, const float* scale, int64_t t,
                                              int H, int vt, int threads, Out* out) {
  const int vectors = H / 4;
  const float4* scale4 = reinterpret_cast<const float4*>(scale);
#pragma unroll
  for (int j = 0; j < kMaxVectors; ++j) {
    const int i = vt + j * threads;
    if (i >= vectors) break;
    const float4 s = scale4[i];
    store4(out + t * H + 4 * i, v[j].x * inv * s.x, v[j].y * inv * s.y, v[j].z * inv * s.z, v[j].w * inv * s.w);
  }
}

// Or quantised for an FP8 block-scaled projection (launch_add_rms_norm_e4m3): a warp's 32 float4s are one 128-column
// group (threads_for gives whole warps, so the float4s vt + j threads of a warp are 32 w .. 32 w + 31 for some w),
// whose amax a warp reduction gives; then q = e4m3(value / s) with s = max(amax, 1e-4) / 448, as
// quantize_activations_fp8 computes on the host from the same fp32 values. Lanes past the row's float4s join the
// reduction with zeros.
struct E4m3Rows {
  uint8_t* values = nullptr;  // [T, H]
  float* scales = nullptr;    // scale (t, group) at fp8_activation_scale_index(t, group, scale_rows)
  int64_t scale_rows = 0;
};

__device__ __forceinline__ void norm_row_part(const float4 (&v)[kMaxVectors], float inv, const float* scale, int64_t t,
                                              int H, int vt, int threads, const E4m3Rows& out) {
  const int vectors = H / 4, lane = vt % 32;
  const float4* scale4 = reinterpret_cast<const float4*>(scale);
#pragma unroll
  for (int j = 0; j < kMaxVectors; ++j) {
    const int i = vt + j * threads;
    if (i - lane >= vectors) break;  // the whole warp's group lies past the row
    const bool in = i < vectors;
    float4 n = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in) {
      const float4 s = scale4[i];
      n = make_float4(v[j].x * inv * s.x, v[j].y * inv * s.y, v[j].z * inv * s.z, v[j].w * inv * s.w);
    }
    const float amax = warp_max(fmaxf(fmaxf(fabsf(n.x), fabsf(n.y)), fmaxf(fabsf(n.z), fabsf(n.w))));
    const float s = fmaxf(amax, 1e-4f) / kFp8E4m3Max;
    if (in) {
      const uint32_t q = static_cast<uint32_t>(__nv_cvt_float_to_fp8(n.x / s, __NV_SATFINITE, __NV_E4M3)) |
                         static_cast<uint32_t>(__nv_cvt_float_to_fp8(n.y / s, __NV_SATFINITE, __NV_E4M3)) << 8 |
                         static_cast<uint32_t>(__nv_cvt_float_to_fp8(n.z / s, __NV_SATFINITE, __NV_E4M3)) << 16 |
                         static_cast<uint32_t>(__nv_cvt_float_to_fp8(n.w / s, __NV_SATFINITE, __NV_E4M3)) << 24;
      *reinterpret_cast<uint32_t*>(out.values + t * H + 4 * i) = q;
    }
    if (lane == 0) out.scales[fp8_activation_scale_index(t, i / 32, out.scale_rows)] = s;
  }
}

__device__ __forceinline__ float inverse_rms(float sum, int H, float eps) {
  return 1.0f / sqrtf(sum / static_cast<float>(H) + eps);
}

// Out: bf16* or float* (rows in that type), or E4m3Rows.
template <typename Out, Delta kDelta, int kTopK = 0, bool kBf16Y = false>
__global__ void add_rms_norm_kernel(float* x, const float* delta, const float* bias, ExpertCombine combine,
                                    const float* scale, int H, float eps, Out out) {
  pdl_prologue();
  const int64_t t = blockIdx.x;
  float4 v[kMaxVectors];
  float sum = add_row_part<kDelta, kTopK, kBf16Y>(reinterpret_cast<float4*>(x + t * H), delta, bias, combine, t, H,
                                                  threadIdx.x, blockDim.x, v);
  sum = block_sum(sum);
  norm_row_part(v, inverse_rms(sum, H, eps), scale, t, H, threadIdx.x, blockDim.x, out);
}

__global__ void moe_combine_kernel(ExpertCombine combine, int H, float* out) {
  pdl_prologue();
  const int64_t t = blockIdx.x;
  float4* row = reinterpret_cast<float4*>(out + t * H);
  for (int i = threadIdx.x; i < H / 4; i += blockDim.x) row[i] = combined_experts<0>(combine, t, i, H);  // fp32 rows
}

__host__ __device__ constexpr int threads_for(int H) {
  const int threads = (H / 4 + 31) / 32 * 32;
  return threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
}

// ---- the o-projection's GEMV with the residual add + RMSNorm after it (launch_dense_gemv_add_rms_norm) ---------------
// dense_gemv.cuh's GEMV (a warp per output, launch_dense_gemv's sums) writes delta; the last of the blocks to finish
// (dense_gemv_then_last_block) then does add_rms_norm_kernel's work for each row with its 8 warps standing in for that
// kernel's threads_for(H) threads: virtual warp w of the row is done by real warp w % 8, each of its lanes taking
// virtual thread 32 w + lane's float4s, and the virtual warps' sums are added in block_sum's order, so x and out are
// the same bits as launch_dense_gemv then launch_add_rms_norm (dense delta) give. delta is read back through L2.
constexpr int kNormWarps = 1024 / 32;  // threads_for's largest block

template <typename Out, int kRows>
__global__ void __launch_bounds__(kDenseGemvWarps * 32)
    dense_gemv_add_rms_norm_kernel(const bf16* in, int K, const bf16* W, const float* bias, float* delta, float* x,
                                   const float* scale, int H, float eps, Out* out, int32_t* counter) {
  pdl_prologue();
  __shared__ __align__(16) bf16 x_s[kRows][kDenseGemvMaxK];
  __shared__ float partial[kNormWarps];
  dense_gemv_load_x<kRows>(in, K, x_s);
  __syncthreads();
  if (!dense_gemv_then_last_block<kRows>(x_s, W, K, H, bias, delta, counter)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int threads = threads_for(H), warps = threads / 32;
  for (int t = 0; t < kRows; ++t) {
    float4* row = reinterpret_cast<float4*>(x + static_cast<int64_t>(t) * H);
    for (int w = warp; w < warps; w += kDenseGemvWarps) {
      float4 v[kMaxVectors];
      float sum = add_row_part<Delta::dense_l2>(row, delta, nullptr, ExpertCombine{}, t, H, 32 * w + lane, threads, v);
      sum = warp_sum(sum);
      if (lane == 0) partial[w] = sum;
    }
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += partial[w];
    const float inv = inverse_rms(total, H, eps);
    for (int w = warp; w < warps; w += kDenseGemvWarps) {
      const int vt = 32 * w + lane;
      float4 v[kMaxVectors];
      add_row_part<Delta::none>(row, nullptr, nullptr, ExpertCombine{}, t, H, vt, threads, v);  // the sums' values, read back
      norm_row_part(v, inv, scale, t, H, vt, threads, out);
    }
    __syncthreads();  // partial[] is reused by the next row
  }
}

template <typename Out>
void launch_fused_norm(cudaStream_t stream, const bf16* in, int rows, int K, const bf16* W, const float* bias,
                       float* delta, float* x, const float* scale, int H, float eps, Out* out, int32_t* counter) {
  const int blocks = ceil_div(H, kDenseGemvWarps), threads = kDenseGemvWarps * 32;
  switch (rows) {
    case 1:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_add_rms_norm_kernel<Out, 1>, blocks, threads, 0, stream, in, K, W,
                                      bias, delta, x, scale, H, eps, out, counter));
      break;
    case 2:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_add_rms_norm_kernel<Out, 2>, blocks, threads, 0, stream, in, K, W,
                                      bias, delta, x, scale, H, eps, out, counter));
      break;
    case 3:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_add_rms_norm_kernel<Out, 3>, blocks, threads, 0, stream, in, K, W,
                                      bias, delta, x, scale, H, eps, out, counter));
      break;
    default:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_add_rms_norm_kernel<Out, 4>, blocks, threads, 0, stream, in, K, W,
                                      bias, delta, x, scale, H, eps, out, counter));
      break;
  }
}

template <typename Out>
void launch_typed(cudaStream_t stream, float* x, const float* delta, const ExpertCombine* combine, const float* scale,
                  int T, int H, float eps, Out out, const float* delta_bias) {
  const ExpertCombine none{};
  // One float4 per thread up to 1024 threads, then up to kMaxVectors each.
  const int threads = threads_for(H);
  if (delta != nullptr && delta_bias != nullptr)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::dense_bias>, T, threads, 0, stream, x, delta,
                                    delta_bias, none, scale, H, eps, out));
  else if (delta != nullptr)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::dense>, T, threads, 0, stream, x, delta, nullptr,
                                    none, scale, H, eps, out));
  else if (combine != nullptr && combine->y_bf16 != nullptr && combine->top_k == 4)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::experts, 4, true>, T, threads, 0, stream, x,
                                    nullptr, nullptr, *combine, scale, H, eps, out));
  else if (combine != nullptr && combine->y_bf16 != nullptr)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::experts, 0, true>, T, threads, 0, stream, x,
                                    nullptr, nullptr, *combine, scale, H, eps, out));
  else if (combine != nullptr && combine->top_k == 4)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::experts, 4>, T, threads, 0, stream, x, nullptr,
                                    nullptr, *combine, scale, H, eps, out));
  else if (combine != nullptr && combine->top_k == 8)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::experts, 8>, T, threads, 0, stream, x, nullptr,
                                    nullptr, *combine, scale, H, eps, out));
  else if (combine != nullptr)
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::experts>, T, threads, 0, stream, x, nullptr,
                                    nullptr, *combine, scale, H, eps, out));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(add_rms_norm_kernel<Out, Delta::none>, T, threads, 0, stream, x, nullptr, nullptr,
                                    none, scale, H, eps, out));
}

}  // namespace

void launch_add_rms_norm(cudaStream_t stream, Precision out_type, float* x, const float* delta,
                         const ExpertCombine* combine, const float* scale, int T, int H, float eps, void* out,
                         const float* delta_bias) {
  if (T == 0) return;
  if (H % 4 != 0 || H / 4 > kMaxVectors * 1024)
    fail_cuda("add_rms_norm", "hidden size must be a multiple of 4 and at most 16384", __FILE__, __LINE__);
  if (out_type == Precision::bf16)
    launch_typed(stream, x, delta, combine, scale, T, H, eps, static_cast<bf16*>(out), delta_bias);
  else
    launch_typed(stream, x, delta, combine, scale, T, H, eps, static_cast<float*>(out), delta_bias);
}

void launch_add_rms_norm_e4m3(cudaStream_t stream, float* x, const float* delta, const ExpertCombine* combine,
                              const float* scale, int T, int H, float eps, uint8_t* values, float* scales,
                              int64_t scale_rows, const float* delta_bias) {
  if (T == 0) return;
  if (H % 4 != 0 || H / 4 > kMaxVectors * 1024)
    fail_cuda("add_rms_norm", "hidden size must be a multiple of 4 and at most 16384", __FILE__, __LINE__);
  if (scale_rows < T) fail_cuda("add_rms_norm", "the scales' token count is below the tokens", __FILE__, __LINE__);
  launch_typed(stream, x, delta, combine, scale, T, H, eps, E4m3Rows{values, scales, scale_rows}, delta_bias);
}

void launch_moe_combine(cudaStream_t stream, const ExpertCombine& combine, int T, int H, float* out) {
  if (T == 0) return;
  if (H % 4 != 0) fail_cuda("moe_combine", "hidden size must be a multiple of 4", __FILE__, __LINE__);
  if (combine.y_bf16 != nullptr) fail_cuda("moe_combine", "takes fp32 expert rows only", __FILE__, __LINE__);
  MOESERVE_CUDA_CHECK(cuda_launch(moe_combine_kernel, T, threads_for(H), 0, stream, combine, H, out));
}

bool dense_gemv_add_rms_norm_supported(int rows, int64_t in_features, int H) {
  return dense_gemv_supported(rows, in_features) && H % 4 == 0 && H / 4 <= kMaxVectors * 1024;
}

void launch_dense_gemv_add_rms_norm(cudaStream_t stream, Precision out_type, const void* in, int rows,
                                    const void* weight, int64_t in_features, const float* bias, float* delta, float* x,
                                    const float* scale, int H, float eps, void* out, int32_t* counter) {
  if (!dense_gemv_add_rms_norm_supported(rows, in_features, H))
    fail_cuda("dense_gemv_add_rms_norm", "1-4 rows of at most 4096 inputs (a multiple of 8), a hidden size that is a "
              "multiple of 4 and at most 16384", __FILE__, __LINE__);
  const auto* inb = static_cast<const bf16*>(in);
  const auto* wb = static_cast<const bf16*>(weight);
  const int K = static_cast<int>(in_features);
  if (out_type == Precision::bf16)
    launch_fused_norm(stream, inb, rows, K, wb, bias, delta, x, scale, H, eps, static_cast<bf16*>(out), counter);
  else
    launch_fused_norm(stream, inb, rows, K, wb, bias, delta, x, scale, H, eps, static_cast<float*>(out), counter);
}

}  // namespace moeserve::cuda
