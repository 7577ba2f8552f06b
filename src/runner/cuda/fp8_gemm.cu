// FP8 block-scaled projections (fp8_gemm.h): the activation quantiser, the plain product, and the launcher that
// picks cuBLASLt or the plain product.
//   act_quant: one warp per (token, 128-column group), 4 columns a lane; amax by a warp reduction, then
//     q = e4m3(x / s) with IEEE division and the conversion's round-to-nearest-even with saturation, which is what
//     quantize_activations_fp8 computes on the host.
//   reference product: one thread per output (a block of 128 consecutive outputs of one token), correctness first.
// CPU reference: cpu::linear (runner/cpu/deepseek_v3_ops.h); the quantiser's: quantize_activations_fp8.
#include "runner/cuda/fp8_gemm.h"

#include <cuda_fp8.h>

#include <mutex>
#include <set>
#include <tuple>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/launch.cuh"
#include "util/log.h"

namespace moeserve::cuda {
namespace {

__device__ __forceinline__ float e4m3_to_float(uint8_t byte) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));
}

template <typename T>
__global__ void quantize_activations_kernel(const T* x, int64_t rows, int64_t K, uint8_t* q, float* scales,
                                            int64_t scale_rows) {
  pdl_prologue();
  constexpr int kPerLane = kFp8Block / 32;
  const int64_t groups = fp8_blocks(K);
  const int64_t group = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (group >= rows * groups) return;
  const int64_t t = group / groups, kb = group % groups;
  float v[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t k = kb * kFp8Block + i * 32 + lane;
    v[i] = k < K ? to_float(x[t * K + k]) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  const float s = fmaxf(amax, 1e-4f) / kFp8E4m3Max;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t k = kb * kFp8Block + i * 32 + lane;
    if (k < K) q[t * K + k] = __nv_cvt_float_to_fp8(v[i] / s, __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) scales[fp8_activation_scale_index(t, kb, scale_rows)] = s;
}

// blockIdx.x: the column block, blockIdx.y: the row block. Pass 1: the block's amax (warp maxima, then warp 0 over
// them); pass 2: q = e4m3(w / s) with IEEE division, as quantize_weight_fp8_blocks does on the host.
constexpr int kWeightQuantThreads = 256;
__global__ void __launch_bounds__(kWeightQuantThreads)
    quantize_weight_blocks_kernel(const bf16* w, int64_t N, int64_t K, uint8_t* q, float* scales) {
  __shared__ float warp_amax[kWeightQuantThreads / 32];
  __shared__ float block_scale;
  const int64_t kb = blockIdx.x, nb = blockIdx.y;
  const int64_t n0 = nb * kFp8Block, k0 = kb * kFp8Block;
  const int rows = static_cast<int>(min(kFp8Block, N - n0)), cols = static_cast<int>(min(kFp8Block, K - k0));
  float amax = 0.0f;
  for (int i = threadIdx.x; i < rows * cols; i += kWeightQuantThreads)
    amax = fmaxf(amax, fabsf(to_float(w[(n0 + i / cols) * K + k0 + i % cols])));
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (float v : warp_amax) m = fmaxf(m, v);
    block_scale = m > 0.0f ? m / kFp8E4m3Max : 1.0f;
    scales[nb * fp8_weight_scale_ld(K) + kb] = block_scale;
  }
  __syncthreads();
  const float s = block_scale;
  for (int i = threadIdx.x; i < rows * cols; i += kWeightQuantThreads) {
    const int64_t index = (n0 + i / cols) * K + k0 + i % cols;
    q[index] = __nv_cvt_float_to_fp8(to_float(w[index]) / s, __NV_SATFINITE, __NV_E4M3);
  }
}

// blockIdx.x: the token; blockIdx.y: 128 outputs.
template <typename Out>
__global__ void fp8_block_gemm_reference_kernel(const uint8_t* xq, const float* x_scales, int64_t rows,
                                                Fp8WeightView w, Out* y) {
  pdl_prologue();
  const int64_t t = blockIdx.x;
  const int64_t n = static_cast<int64_t>(blockIdx.y) * kFp8Block + threadIdx.x;
  if (n >= w.rows) return;
  const int64_t K = w.cols, ld = fp8_weight_scale_ld(K);
  const uint8_t* x_row = xq + t * K;
  const uint8_t* w_row = w.values + n * K;
  float acc = 0.0f;
  for (int64_t kb = 0; kb < fp8_blocks(K); ++kb) {
    float partial = 0.0f;
    for (int64_t k = kb * kFp8Block; k < min(K, (kb + 1) * kFp8Block); ++k)
      partial = fmaf(e4m3_to_float(x_row[k]), e4m3_to_float(w_row[k]), partial);
    acc = fmaf(partial, x_scales[fp8_activation_scale_index(t, kb, rows)] * w.scales[(n / kFp8Block) * ld + kb], acc);
  }
  y[t * w.rows + n] = from_float<Out>(acc);
}

// Once per (shape, reason): the plain product is slow, so its use must be visible, but not once per layer and step.
void warn_reference_once(int64_t rows, int64_t N, int64_t K, Precision out, const std::string& reason) {
  static std::mutex mutex;
  static std::set<std::tuple<int64_t, int64_t, int64_t, int>> warned;
  std::lock_guard lock(mutex);
  if (!warned.emplace(rows, N, K, static_cast<int>(out)).second) return;
  log_warning("FP8 block GEMM [{}, {}] x [{}, {}]^T ({} out) runs on the plain CUDA kernel: {}", rows, K, N, K,
              out == Precision::bf16 ? "bf16" : "fp32", reason);
}

}  // namespace

Fp8DeviceWeight::Fp8DeviceWeight(const Fp8BlockMatrix& w)
    : values_(static_cast<size_t>(w.rows) * w.cols), scales_(to_device(fp8_weight_scales_for_cublaslt(w))),
      rows_(w.rows), cols_(w.cols) {
  check_fp8_gemm_shape(0, w.rows, w.cols);
  MOESERVE_CUDA_CHECK(cudaMemcpy(values_.get(), w.data, values_.bytes(), cudaMemcpyHostToDevice));
}

void launch_fp8_quantize_activations(cudaStream_t stream, Precision type, const void* x, int64_t rows, int64_t K,
                                     const Fp8Activations& out, int64_t scale_rows) {
  check_fp8_gemm_shape(rows, 1, K);
  if (scale_rows == 0) scale_rows = rows;
  if (scale_rows < rows)
    fail_cuda("fp8_quantize_activations", "the scales' token count is below the tokens quantised", __FILE__, __LINE__);
  if (rows == 0) return;
  constexpr int kWarpsPerBlock = 8;
  const int64_t groups = rows * fp8_blocks(K);
  const auto blocks = static_cast<unsigned>((groups + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (type == Precision::bf16)
    MOESERVE_CUDA_CHECK(cuda_launch(quantize_activations_kernel<bf16>, blocks, kWarpsPerBlock * 32, 0, stream,
                                    static_cast<const bf16*>(x), rows, K, out.values, out.scales, scale_rows));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(quantize_activations_kernel<float>, blocks, kWarpsPerBlock * 32, 0, stream,
                                    static_cast<const float*>(x), rows, K, out.values, out.scales, scale_rows));
}

Fp8QuantisedWeight::Fp8QuantisedWeight(cudaStream_t stream, const void* weight_bf16, int64_t N, int64_t K)
    : values_(static_cast<size_t>(N) * K), scales_(fp8_weight_scale_count(N, K) * sizeof(float)), rows_(N), cols_(K) {
  check_fp8_gemm_shape(0, N, K);
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(scales_.get(), 0, scales_.bytes(), stream));  // the layout's padding
  const dim3 grid(static_cast<unsigned>(fp8_blocks(K)), static_cast<unsigned>(fp8_blocks(N)));
  quantize_weight_blocks_kernel<<<grid, kWeightQuantThreads, 0, stream>>>(static_cast<const bf16*>(weight_bf16), N, K,
                                                                          values_.as<uint8_t>(), scales_.as<float>());
  MOESERVE_CUDA_CHECK(cudaGetLastError());
}

bool fp8_dense_available(Blas& blas, int64_t rows, const Fp8WeightView& w, Precision out, std::string* why) {
  check_fp8_gemm_shape(rows, w.rows, w.cols);
  if (rows == 0) return true;
  const int64_t padded = fp8_padded_rows(rows);
  std::string refusal = fp8_gemm_cublaslt_refusal(padded, w.rows, w.cols);
  if (!refusal.empty() || !blas.has_fp8_block_algorithm(padded, w.rows, w.cols, out, &refusal)) {
    if (why != nullptr) *why = refusal;
    return false;
  }
  return true;
}

void fp8_dense_product(cudaStream_t stream, Blas& blas, int64_t rows, const Fp8WeightView& w,
                       const Fp8Activations& scratch, Precision out, void* y) {
  if (rows == 0) return;
  const int64_t padded = fp8_padded_rows(rows);
  blas.linear_fp8_block(stream, scratch.values, scratch.scales, padded, w.values, w.scales, w.rows, w.cols, out, y);
}

bool fp8_dense_linear(cudaStream_t stream, Blas& blas, const void* x_bf16, int64_t rows, const Fp8WeightView& w,
                      const Fp8Activations& scratch, float* y, std::string* why) {
  if (!fp8_dense_available(blas, rows, w, Precision::f32, why)) return false;
  if (rows == 0) return true;
  launch_fp8_quantize_activations(stream, Precision::bf16, x_bf16, rows, w.cols, scratch, fp8_padded_rows(rows));
  fp8_dense_product(stream, blas, rows, w, scratch, Precision::f32, y);
  return true;
}

void launch_fp8_block_gemm_reference(cudaStream_t stream, const Fp8Activations& x, int64_t rows,
                                     const Fp8WeightView& w, Precision out, void* y) {
  check_fp8_gemm_shape(rows, w.rows, w.cols);
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(fp8_blocks(w.rows)));
  if (out == Precision::bf16)
    MOESERVE_CUDA_CHECK(cuda_launch(fp8_block_gemm_reference_kernel<bf16>, grid, kFp8Block, 0, stream, x.values,
                                    x.scales, rows, w, static_cast<bf16*>(y)));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(fp8_block_gemm_reference_kernel<float>, grid, kFp8Block, 0, stream, x.values,
                                    x.scales, rows, w, static_cast<float*>(y)));
}

Fp8GemmPath fp8_block_linear(cudaStream_t stream, Blas& blas, Precision x_type, const void* x, int64_t rows,
                             const Fp8WeightView& w, const Fp8Activations& scratch, Precision out, void* y) {
  check_fp8_gemm_shape(rows, w.rows, w.cols);
  if (rows == 0) return Fp8GemmPath::cublaslt;
  launch_fp8_quantize_activations(stream, x_type, x, rows, w.cols, scratch);
  std::string refusal = fp8_gemm_cublaslt_refusal(rows, w.rows, w.cols);
  if (refusal.empty() && blas.has_fp8_block_algorithm(rows, w.rows, w.cols, out, &refusal)) {
    blas.linear_fp8_block(stream, scratch.values, scratch.scales, rows, w.values, w.scales, w.rows, w.cols, out, y);
    return Fp8GemmPath::cublaslt;
  }
  warn_reference_once(rows, w.rows, w.cols, out, refusal);
  launch_fp8_block_gemm_reference(stream, scratch, rows, w, out, y);
  return Fp8GemmPath::reference;
}

}  // namespace moeserve::cuda
