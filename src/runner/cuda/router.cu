// Router top-k and softmax over the selected logits: one warp per token, each lane holding every 32nd logit;
// k rounds of a warp argmax (ties to the lower expert id, as the CPU reference), then a softmax over the k
// winners. The token counts per expert (for grouping) are accumulated here too, onto counts that the grouping
// scan left at zero.
// CPU reference: cpu::route_top_k.
#include <cmath>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

__global__ void route_top_k_kernel(const float* logits, int T, int E, int k, int32_t* experts, float* weights,
                                   int32_t* expert_counts) {
  pdl_prologue();
  const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (t >= T) return;
  warp_route_top_k(logits, t, E, k, [&](int j, int expert, float weight) {
    experts[static_cast<int64_t>(t) * k + j] = expert;
    weights[static_cast<int64_t>(t) * k + j] = weight;
    atomicAdd(&expert_counts[expert], 1);
  });
}

}  // namespace

void launch_route_top_k(cudaStream_t stream, const float* logits, int T, int E, int k, int32_t* experts,
                        float* weights, int32_t* expert_counts) {
  if (E > kMaxExperts || k > kMaxTopK || k > E)
    fail_cuda("route_top_k", "the CUDA router supports at most 256 experts and top-8", __FILE__, __LINE__);
  if (T == 0) return;
  constexpr int kWarpsPerBlock = 4;
  MOESERVE_CUDA_CHECK(cuda_launch(route_top_k_kernel, (T + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * 32, 0,
                                  stream, logits, T, E, k, experts, weights, expert_counts));
}

}  // namespace moeserve::cuda
