// DeepSeek-V3's MoE output (deepseek_kernels.h): per token the routed experts' outputs weighted and summed in slot
// order (the router lists a token's experts ascending, the order cpu::feed_forward adds them in), then the shared
// expert's output added. One block per token, a float4 a thread.
// CPU reference: cpu::feed_forward's sums.
#include <algorithm>

#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

__global__ void deepseek_moe_combine_kernel(ExpertCombine combine, const float* shared, int H, float* out) {
  pdl_prologue();
  const int64_t t = blockIdx.x;
  for (int i = threadIdx.x; i < H / 4; i += blockDim.x) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < combine.top_k; ++j) {
      const int64_t slot = t * combine.top_k + j;
      const int row = combine.slot_row[slot];
      if (row < 0) continue;  // a pair the grouping gave no row (another expert-parallel rank's)
      const float w = combine.weights[slot];
      const float4 y = reinterpret_cast<const float4*>(combine.y + static_cast<int64_t>(row) * H)[i];
      sum = make_float4(fmaf(y.x, w, sum.x), fmaf(y.y, w, sum.y), fmaf(y.z, w, sum.z), fmaf(y.w, w, sum.w));
    }
    if (shared != nullptr) {
      const float4 s = reinterpret_cast<const float4*>(shared + t * H)[i];
      sum = make_float4(sum.x + s.x, sum.y + s.y, sum.z + s.z, sum.w + s.w);
    }
    reinterpret_cast<float4*>(out + t * H)[i] = sum;
  }
}

}  // namespace

void launch_deepseek_moe_combine(cudaStream_t stream, const ExpertCombine& combine, const float* shared, int T, int H,
                                 float* out) {
  if (T == 0) return;
  if (H % 4 != 0) fail_cuda("deepseek_moe_combine", "hidden size must be a multiple of 4", __FILE__, __LINE__);
  if (combine.y_bf16 != nullptr) fail_cuda("deepseek_moe_combine", "takes fp32 expert rows only", __FILE__, __LINE__);
  const int threads = std::clamp((H / 4 + 31) / 32 * 32, 32, 1024);
  MOESERVE_CUDA_CHECK(cuda_launch(deepseek_moe_combine_kernel, T, threads, 0, stream, combine, shared, H, out));
}

}  // namespace moeserve::cuda
