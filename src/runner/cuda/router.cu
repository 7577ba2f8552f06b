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

constexpr int kPerLane = kMaxExperts / 32;

__global__ void route_top_k_kernel(const float* logits, int T, int E, int k, int32_t* experts, float* weights,
                                   int32_t* expert_counts) {
  pdl_prologue();
  const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= T) return;
  float values[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    values[i] = e < E ? logits[static_cast<int64_t>(t) * E + e] : -INFINITY;
  }
  float top_value[kMaxTopK];
  int top_id[kMaxTopK];
  for (int j = 0; j < k; ++j) {
    float best = 0.0f;
    const int best_id = warp_take_max(values, E, &best);
    // Registers indexed by the loop counter: k is small and the loop is unrolled up to kMaxTopK.
#pragma unroll
    for (int slot = 0; slot < kMaxTopK; ++slot)
      if (slot == j) {
        top_value[slot] = best;
        top_id[slot] = best_id;
      }
  }
  if (lane != 0) return;
  float sum = 0.0f;
  float w[kMaxTopK];
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= k) break;
    w[j] = expf(top_value[j] - top_value[0]);
    sum += w[j];
  }
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= k) break;
    experts[static_cast<int64_t>(t) * k + j] = top_id[j];
    weights[static_cast<int64_t>(t) * k + j] = w[j] / sum;
    atomicAdd(&expert_counts[top_id[j]], 1);
  }
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
