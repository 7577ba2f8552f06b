// MoE token grouping: the (token, slot) pairs of a step sorted by expert, so that each expert's weights are
// read once for all its tokens. A one-block scan turns the router's per-expert counts into row offsets and a
// list of row tiles (the expert GEMMs' work list, sized on the device so a graph replays any routing); then
// every pair takes a row of its expert by an atomic. The order of rows inside an expert varies between runs,
// but every row is computed on its own and the combine reads rows by (token, slot), so results do not.
// CPU reference: the grouping in CpuRunner::moe_layer.
#include <algorithm>

#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kMaxExperts = 1024;

__global__ void moe_scan_kernel(int rows_per_tile, MoeRouting r) {
  __shared__ int row_offset[kMaxExperts + 1];
  __shared__ int tile_offset[kMaxExperts + 1];
  const int E = r.num_experts;
  // Counts into shared memory in parallel (a serial walk over global memory would pay its latency E times).
  __shared__ int counts[kMaxExperts];
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = r.expert_counts[e];
  __syncthreads();
  if (threadIdx.x == 0) {
    int rows = 0, tiles = 0;
    for (int e = 0; e < E; ++e) {
      row_offset[e] = rows;
      tile_offset[e] = tiles;
      rows += counts[e];
      tiles += (counts[e] + rows_per_tile - 1) / rows_per_tile;
    }
    row_offset[E] = rows;
    tile_offset[E] = tiles;
    r.expert_offsets[E] = rows;
    *r.num_tiles = tiles;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    r.expert_offsets[e] = row_offset[e];
    r.expert_fill[e] = 0;
    for (int tile = tile_offset[e]; tile < tile_offset[e + 1]; ++tile) {
      r.tile_expert[tile] = e;
      r.tile_row0[tile] = row_offset[e] + (tile - tile_offset[e]) * rows_per_tile;
    }
  }
}

__global__ void moe_place_kernel(const int32_t* experts, int pairs, int k, MoeRouting r) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int e = experts[i];
  const int row = r.expert_offsets[e] + atomicAdd(&r.expert_fill[e], 1);
  r.row_token[row] = i / k;
  r.row_expert[row] = e;
  r.slot_row[i] = row;
}

}  // namespace

// Each expert with rows adds at most one partial tile, and at most min(E, rows) experts have rows.
int moe_max_tiles(int rows, int rows_per_tile, int num_experts) {
  return (rows + rows_per_tile - 1) / rows_per_tile + std::min(num_experts, rows);
}

void launch_group_by_expert(cudaStream_t stream, const int32_t* experts, int T, int k, int rows_per_tile,
                            const MoeRouting& routing) {
  if (routing.num_experts > kMaxExperts) fail_cuda("group_by_expert", "more than 1024 experts", __FILE__, __LINE__);
  moe_scan_kernel<<<1, 256, 0, stream>>>(rows_per_tile, routing);
  MOESERVE_CUDA_CHECK_LAUNCH();
  const int pairs = T * k;
  if (pairs == 0) return;
  moe_place_kernel<<<(pairs + 255) / 256, 256, 0, stream>>>(experts, pairs, k, routing);
  MOESERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace moeserve::cuda
