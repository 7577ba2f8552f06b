// DeepSeek-V3's noaux_tc router: one warp per token. The warp writes the scores s = sigmoid(u) and the choice
// scores r = s + bias to shared memory; lane g scores group g by its two largest r; lane 0 keeps the topk_group
// best groups (ties to the lower group); then top_k rounds of a warp argmax over the kept experts' r (ties to the
// lower expert, each lane holding every 32nd expert), and lane 0 sorts the winners ascending and writes
// s_e / (sum of chosen s + 1e-20) * routed_scaling_factor (norm_topk_prob; else s_e times the factor).
// CPU reference: cpu::route_noaux_tc (runner/cpu/deepseek_v3_ops.h), the same contract.
#include <cmath>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = kMaxExperts / 32;

__global__ void route_noaux_tc_kernel(const float* logits, const float* bias, int T, NoauxTcRouting r,
                                      int32_t* experts, float* weights, int32_t* expert_counts) {
  pdl_prologue();
  __shared__ float score_of[kWarpsPerBlock][kMaxExperts];
  __shared__ float choice_of[kWarpsPerBlock][kMaxExperts];
  __shared__ float group_score[kWarpsPerBlock][kMaxNoauxGroups];
  __shared__ unsigned kept_groups[kWarpsPerBlock];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  if (t >= T) return;  // whole warps leave together: no block-wide barrier follows
  const int E = r.num_experts, per_group = E / r.n_group;
  float* score = score_of[warp];
  float* choice = choice_of[warp];
  for (int e = lane; e < E; e += 32) {
    score[e] = 1.0f / (1.0f + expf(-logits[static_cast<int64_t>(t) * E + e]));
    choice[e] = score[e] + bias[e];
  }
  __syncwarp();
  if (lane < r.n_group) {
    float best = -INFINITY, second = -INFINITY;
    for (int e = lane * per_group; e < (lane + 1) * per_group; ++e) {
      if (choice[e] > best) {
        second = best;
        best = choice[e];
      } else if (choice[e] > second) {
        second = choice[e];
      }
    }
    group_score[warp][lane] = best + second;
  }
  __syncwarp();
  if (lane == 0) {
    unsigned kept = 0;
    for (int i = 0; i < r.topk_group; ++i) {
      int chosen = -1;
      for (int g = 0; g < r.n_group; ++g)
        if (!(kept >> g & 1u) && (chosen < 0 || group_score[warp][g] > group_score[warp][chosen])) chosen = g;
      kept |= 1u << chosen;
    }
    kept_groups[warp] = kept;
  }
  __syncwarp();
  const unsigned kept = kept_groups[warp];
  float values[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    values[i] = e < E && (kept >> (e / per_group) & 1u) ? choice[e] : -INFINITY;
  }
  int top_id[kMaxTopK];
  for (int j = 0; j < r.top_k; ++j) {
    float best = 0.0f;
    const int best_id = warp_take_max(values, E, &best);
    // Registers indexed by the loop counter: top_k is small and the loop is unrolled up to kMaxTopK.
#pragma unroll
    for (int slot = 0; slot < kMaxTopK; ++slot)
      if (slot == j) top_id[slot] = best_id;
  }
  // Dropped groups' experts and the chosen ones are -inf, so a round picks one of them only when no kept expert
  // is left: launch_route_noaux_tc requires topk_group * per_group >= top_k, and finite logits and bias keep
  // every kept r finite.
  if (lane != 0) return;
#pragma unroll
  for (int a = 1; a < kMaxTopK; ++a)
    for (int b = a; b > 0 && b < r.top_k && top_id[b] < top_id[b - 1]; --b) {
      const int swap = top_id[b];
      top_id[b] = top_id[b - 1];
      top_id[b - 1] = swap;
    }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j)
    if (j < r.top_k) sum += score[top_id[j]];
  const float denominator = r.normalize ? sum + 1e-20f : 1.0f;
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= r.top_k) break;
    experts[static_cast<int64_t>(t) * r.top_k + j] = top_id[j];
    weights[static_cast<int64_t>(t) * r.top_k + j] = score[top_id[j]] / denominator * r.scaling_factor;
    if (expert_counts != nullptr) atomicAdd(&expert_counts[top_id[j]], 1);
  }
}

}  // namespace

void launch_route_noaux_tc(cudaStream_t stream, const float* logits, const float* bias, int T,
                           const NoauxTcRouting& routing, int32_t* experts, float* weights, int32_t* expert_counts) {
  const NoauxTcRouting& r = routing;
  const bool valid = r.num_experts >= 1 && r.num_experts <= kMaxExperts && r.n_group >= 1 &&
                     r.n_group <= kMaxNoauxGroups && r.num_experts % r.n_group == 0 && r.topk_group >= 1 &&
                     r.topk_group <= r.n_group && r.top_k >= 1 && r.top_k <= kMaxTopK &&
                     r.top_k <= r.topk_group * (r.num_experts / r.n_group) && r.num_experts / r.n_group >= 2 && T >= 0;
  if (!valid)
    fail_cuda("route_noaux_tc",
              "the CUDA noaux_tc router takes up to 256 experts in 1..8 equal groups of at least 2, topk_group <= "
              "n_group, top-8 at most and no more than the kept groups hold",
              __FILE__, __LINE__);
  if (T == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(route_noaux_tc_kernel, (T + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * 32,
                                  0, stream, logits, bias, T, r, experts, weights, expert_counts));
}

}  // namespace moeserve::cuda
