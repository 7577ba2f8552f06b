// Dense projections for decode (at most 4 rows): y[t] = x[t] W^T + bias with bf16 x and W, fp32 accumulation and
// output, where the weight matrix is read once and the cost is its bytes. A warp owns one weight row: lanes read
// consecutive 16-byte pieces (a 512-byte coalesced line per step, several steps in flight), multiply them with
// the rows of x held in shared memory, and reduce across the warp. cuBLASLt's choices for these shapes, under
// ncu at batch 1 on gpt-oss-120b (split-K GEMM plus a reduction kernel), took ~15 us for the 29.5 MB QKV
// matrix, 2 TB/s. CPU reference: cpu::linear.
#include "runner/cuda/dense_gemv.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kWarps = kDenseGemvWarps;
constexpr int kMaxK = kDenseGemvMaxK;

template <int kRows>
__global__ void __launch_bounds__(kWarps * 32) dense_gemv_kernel(const bf16* x, int K, const bf16* W, int N,
                                                                 const float* bias, float* y) {
  pdl_prologue();
  __shared__ __align__(16) bf16 x_s[kRows][kMaxK];
  dense_gemv_load_x<kRows>(x, K, x_s);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + warp;
  if (n >= N) return;
  float acc[kRows];
  dense_gemv_row<kRows>(x_s, W + static_cast<int64_t>(n) * K, K, lane, acc);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r) y[static_cast<int64_t>(r) * N + n] = acc[r] + (bias != nullptr ? bias[n] : 0.0f);
}

}  // namespace

bool dense_gemv_supported(int rows, int64_t in_features) {
  return rows >= 1 && rows <= kMaxDenseGemvRows && in_features % 8 == 0 && in_features <= kMaxK;
}

void launch_dense_gemv(cudaStream_t stream, const void* x, int rows, const void* weight, int64_t out_features,
                       int64_t in_features, const float* bias, float* y) {
  if (!dense_gemv_supported(rows, in_features))
    fail_cuda("dense_gemv", "at most 4 rows and 4096 inputs, a multiple of 8", __FILE__, __LINE__);
  const int blocks = ceil_div(out_features, kWarps);
  const auto* xb = static_cast<const bf16*>(x);
  const auto* wb = static_cast<const bf16*>(weight);
  const int N = static_cast<int>(out_features), K = static_cast<int>(in_features);
  switch (rows) {
    case 1:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_kernel<1>, blocks, kWarps * 32, 0, stream, xb, K, wb, N, bias, y));
      break;
    case 2:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_kernel<2>, blocks, kWarps * 32, 0, stream, xb, K, wb, N, bias, y));
      break;
    case 3:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_kernel<3>, blocks, kWarps * 32, 0, stream, xb, K, wb, N, bias, y));
      break;
    default:
      MOESERVE_CUDA_CHECK(cuda_launch(dense_gemv_kernel<4>, blocks, kWarps * 32, 0, stream, xb, K, wb, N, bias, y));
      break;
  }
}

}  // namespace moeserve::cuda
