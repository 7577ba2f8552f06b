// MoE token grouping: the (token, slot) pairs of a step sorted by expert, so that each expert's weights are
// read once for all its tokens. A one-block scan turns the router's per-expert counts into row offsets and a
// list of row tiles (the expert GEMMs' work list, sized on the device so a graph replays any routing); then
// every pair takes a row of its expert by an atomic (one launch for both when the step is decode-sized). The order of rows inside an expert varies between runs,
// but every row is computed on its own and the combine reads rows by (token, slot), so results do not. Rows of two
// groupings (two tensor-parallel ranks) do not match by index, though: each rank combines its own (cuda_runner.cc).
// Decode steps of up to kRouteGroupMaxTokens tokens run the router's top-k and the whole grouping in one block
// instead (route_group_kernel): counts in shared memory, the same scan, and rows placed in (token, slot) order.
// CPU reference: the grouping in CpuRunner::moe_layer.
#include <algorithm>

#include "runner/cuda/dense_gemv.cuh"
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kExpertsPerLane = kMaxExperts / 32;

// Tiles of width classes: fixed tiling has one class of rows_per_tile rows; mixed tiling (rows_per_tile
// kMoeMixedTileRows) three, 32-, 16- and 8-row tiles in that order of the list, each expert in the class its own
// count picks (moe_mixed_tile_rows); split tiling (kMoeSplitTileRows) two, an expert's whole 128-row tiles and its
// few last rows' 32-row tiles (moe_split_small_rows). Each class covers one span of an expert's rows.
constexpr int kMixedClasses = 3;
struct Tiling {
  bool mixed = false, split = false;
  int rows_per_tile = 8;
  MoeMixedBounds bounds;
  __device__ bool classed() const { return mixed || split; }
  __device__ int width(int cls) const {
    return mixed ? moe_mixed_class_rows(cls) : split ? (cls == 0 ? kMoePrefillTileRows : kMoeSplitSmallTileRows)
                                                     : rows_per_tile;
  }
  // The expert's rows [first, end) in class cls's tiles, for an expert of `rows` rows.
  __device__ void span(int rows, int cls, int& first, int& end) const {
    if (split) {
      const int small = moe_split_small_rows(rows, bounds.split_max);
      first = cls == 0 ? 0 : rows - small;
      end = cls == 0 ? rows - small : cls == 1 ? rows : first;
      return;
    }
    const bool in = cls == (mixed ? moe_mixed_tile_class(rows, bounds) : 0);
    first = 0;
    end = in ? rows : 0;
  }
  __device__ int tiles(int rows, int cls) const {
    int first = 0, end = 0;
    span(rows, cls, first, end);
    return (end - first + width(cls) - 1) / width(cls);
  }
};

// One warp: lane l takes experts [l * per_lane, (l + 1) * per_lane), sums their rows and tiles per class, and warp
// exclusive scans over the lanes give every expert its first row and tile. (Version 1 walked the experts in one
// thread: ~10 us per layer under ncu at 128 experts.)
// expert_counts [router_experts]: the router's r.expert_counts, or route_group_kernel's own in shared memory. Also
// zeroes the counts it read, so the next layer's router starts from zero without a memset.
__device__ void scan_experts(const Tiling tiling, const MoeRouting& r, int32_t* expert_counts) {
  const int E = r.num_experts, lane = threadIdx.x;
  int32_t* const counts_of = expert_counts + r.first_expert;  // this rank's experts' counts
  const int per_lane = (E + 31) / 32, first = lane * per_lane;
  int counts[kExpertsPerLane];
  int rows = 0, tiles[kMixedClasses] = {};
#pragma unroll
  for (int i = 0; i < kExpertsPerLane; ++i) {
    counts[i] = i < per_lane && first + i < E ? counts_of[first + i] : 0;
    if (i < per_lane && first + i < E) counts_of[first + i] = 0;
    rows += counts[i];
#pragma unroll
    for (int c = 0; c < kMixedClasses; ++c) tiles[c] += tiling.tiles(counts[i], c);
  }
  int row_offset = rows, tile_offset[kMixedClasses];  // inclusive scans, then made exclusive
#pragma unroll
  for (int c = 0; c < kMixedClasses; ++c) tile_offset[c] = tiles[c];
  for (int delta = 1; delta < 32; delta <<= 1) {
    const int row_before = __shfl_up_sync(0xffffffffu, row_offset, delta);
    int tile_before[kMixedClasses];
#pragma unroll
    for (int c = 0; c < kMixedClasses; ++c) tile_before[c] = __shfl_up_sync(0xffffffffu, tile_offset[c], delta);
    if (lane >= delta) {
      row_offset += row_before;
#pragma unroll
      for (int c = 0; c < kMixedClasses; ++c) tile_offset[c] += tile_before[c];
    }
  }
  // Each class's tiles follow the classes before it: the totals are lane 31's inclusive sums.
  int class_base = 0, class_total[kMixedClasses];
#pragma unroll
  for (int c = 0; c < kMixedClasses; ++c) {
    class_total[c] = __shfl_sync(0xffffffffu, tile_offset[c], 31);
    tile_offset[c] += class_base - tiles[c];
    class_base += class_total[c];
  }
  // Other ranks' experts (expert parallelism): their counts are zeroed too, for the next layer's router.
  const int router_experts = r.router_experts > 0 ? r.router_experts : E;
  for (int e = lane; e < router_experts; e += 32)
    if (e < r.first_expert || e >= r.first_expert + E) expert_counts[e] = 0;
  if (lane == 31) {
    r.expert_offsets[E] = row_offset;
    r.num_tiles[0] = class_base;
    if (tiling.classed())
#pragma unroll
      for (int c = 0; c < kMixedClasses; ++c) r.num_tiles[1 + c] = class_total[c];
  }
  row_offset -= rows;
#pragma unroll
  for (int i = 0; i < kExpertsPerLane; ++i) {
    if (i >= per_lane || first + i >= E) break;
    const int e = first + i;
    r.expert_offsets[e] = row_offset;
    r.expert_fill[e] = 0;
#pragma unroll
    for (int c = 0; c < kMixedClasses; ++c) {
      int first = 0, end = 0;
      tiling.span(counts[i], c, first, end);
      const int width = tiling.width(c);
      for (int row = first; row < end; row += width, ++tile_offset[c]) {
        r.tile_expert[tile_offset[c]] = e;
        r.tile_row0[tile_offset[c]] = row_offset + row;
      }
    }
    row_offset += counts[i];
  }
}

__global__ void moe_scan_kernel(const Tiling tiling, MoeRouting r) {
  pdl_prologue();
  scan_experts(tiling, r, r.expert_counts);
}

__device__ void place_pair(const int32_t* experts, int i, int k, const MoeRouting& r) {
  const int e = experts[i] - r.first_expert;
  if (e < 0 || e >= r.num_experts) {  // another rank's expert
    r.slot_row[i] = -1;
    return;
  }
  const int row = r.expert_offsets[e] + atomicAdd(&r.expert_fill[e], 1);
  r.row_token[row] = i / k;
  r.row_expert[row] = e;
  r.slot_row[i] = row;
}

__global__ void moe_place_kernel(const int32_t* experts, int pairs, int k, MoeRouting r) {
  pdl_prologue();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) place_pair(experts, i, k, r);
}

// Decode-sized steps (pairs <= the block): scan and placement in one launch. The block stays small enough for
// the scan's registers (1,024 threads of them were more than a block may hold).
constexpr int kFusedPairs = 256;
__global__ void __launch_bounds__(kFusedPairs)
    moe_group_small_kernel(const int32_t* experts, int pairs, int k, const Tiling tiling, MoeRouting r) {
  pdl_prologue();
  if (threadIdx.x < 32) scan_experts(tiling, r, r.expert_counts);
  __syncthreads();  // offsets and zeroed fill counts are visible to the block
  if (static_cast<int>(threadIdx.x) < pairs) place_pair(experts, threadIdx.x, k, r);
}

// ---- router top-k and grouping in one block (launch_route_top_k_and_group) ------------------------------------------
// A block's shared memory for route_and_group: up to kMaxPairs (token, slot) pairs.
template <int kMaxPairs>
struct RouteGroupShared {
  static constexpr int kChunks = (kMaxPairs + 31) / 32;  // chunks of 32 consecutive pairs, one warp's placement
  int32_t pair_expert[kMaxPairs];
  int16_t before[kChunks][kMaxExperts];  // a chunk's pairs per expert, then those before it
  int32_t counts[kMaxExperts];
};

// The whole block, a warp per token (two at most each): top-k, then counts per chunk of 32 pairs (__match_any_sync)
// and their exclusive scan over the chunks per expert, the grouping's scan on the totals, and each pair's row: its
// expert's offset + its expert's pairs in earlier chunks + those at lower lanes of its own chunk, so rows inside an
// expert are in pair (token, slot) order. The global expert_counts are neither read nor written.
template <int kMaxPairs>
__device__ void route_and_group(const float* logits, int T, int E, int k, int32_t* experts, float* weights,
                                const Tiling& tiling, const MoeRouting& r, RouteGroupShared<kMaxPairs>& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int pairs = T * k, chunks = (pairs + 31) / 32;
  for (int i = threadIdx.x; i < chunks * E; i += blockDim.x) sm.before[i / E][i % E] = 0;
  for (int t = warp; t < T; t += warps)
    warp_route_top_k(logits, t, E, k, [&](int j, int expert, float weight) {  // router.cu's very computation
      experts[t * k + j] = expert;
      weights[t * k + j] = weight;
      sm.pair_expert[t * k + j] = expert;
    });
  __syncthreads();
  for (int c = warp; c < chunks; c += warps) {
    const int i = c * 32 + lane, e = i < pairs ? sm.pair_expert[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && lane == __ffs(same) - 1) sm.before[c][e] = static_cast<int16_t>(__popc(same));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int sum = 0;
    for (int c = 0; c < chunks; ++c) {
      const int n = sm.before[c][e];
      sm.before[c][e] = static_cast<int16_t>(sum);
      sum += n;
    }
    sm.counts[e] = sum;
  }
  __syncthreads();
  if (warp == 0) scan_experts(tiling, r, sm.counts);
  __syncthreads();  // offsets are visible to the block
  for (int c = warp; c < chunks; c += warps) {
    const int i = c * 32 + lane, e = i < pairs ? sm.pair_expert[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (e < 0) continue;
    const int local = e - r.first_expert;
    if (local < 0 || local >= r.num_experts) {  // another rank's expert
      r.slot_row[i] = -1;
      continue;
    }
    const int row = r.expert_offsets[local] + sm.before[c][e] + __popc(same & ((1u << lane) - 1u));
    r.row_token[row] = i / k;
    r.row_expert[row] = local;
    r.slot_row[i] = row;
  }
}

constexpr int kRouteGroupMaxPairs = kRouteGroupMaxTokens * kMaxTopK;

__global__ void __launch_bounds__(32 * 32)
    route_group_kernel(const float* logits, int T, int E, int k, int32_t* experts, float* weights, const Tiling tiling,
                       MoeRouting r) {
  pdl_prologue();
  __shared__ RouteGroupShared<kRouteGroupMaxPairs> sm;
  route_and_group(logits, T, E, k, experts, weights, tiling, r, sm);
}

// ---- the router projection, top-k and grouping in one launch (launch_router_route_and_group) ------------------------
// The router's GEMV (dense_gemv.cuh: a warp per expert, the same sums as launch_dense_gemv) over ceil(E / 8) blocks;
// each block writes its logits, and the last block to finish (dense_gemv_then_last_block) reads them all back
// through L2 and runs route_and_group with its 8 warps.
template <int kRows>
__global__ void __launch_bounds__(kDenseGemvWarps * 32)
    router_route_group_kernel(const bf16* x, int K, const bf16* W, const float* bias, int E, int k, float* logits,
                              int32_t* experts, float* weights, const Tiling tiling, MoeRouting r, int32_t* counter) {
  pdl_prologue();
  __shared__ __align__(16) bf16 x_s[kRows][kDenseGemvMaxK];
  __shared__ float logits_s[kRows * kMaxExperts];
  __shared__ RouteGroupShared<kRows * kMaxTopK> sm;
  dense_gemv_load_x<kRows>(x, K, x_s);
  __syncthreads();
  if (!dense_gemv_then_last_block<kRows>(x_s, W, K, E, bias, logits, counter)) return;
  for (int i = threadIdx.x; i < kRows * E; i += blockDim.x) logits_s[i] = __ldcg(logits + i);
  __syncthreads();
  route_and_group(logits_s, kRows, E, k, experts, weights, tiling, r, sm);
}

// The tiling of rows_per_tile for `routing`, with the checks both launchers share.
Tiling grouping_tiling(int rows_per_tile, const MoeRouting& routing) {
  if (routing.num_experts > kMaxExperts || routing.router_experts > kMaxExperts)
    fail_cuda("group_by_expert", "more than 256 experts", __FILE__, __LINE__);
  if (routing.first_expert < 0 ||
      routing.first_expert + routing.num_experts > std::max(routing.router_experts, routing.num_experts))
    fail_cuda("group_by_expert", "a rank's experts outside the router's", __FILE__, __LINE__);
  Tiling tiling;
  tiling.mixed = rows_per_tile == kMoeMixedTileRows;
  tiling.split = rows_per_tile == kMoeSplitTileRows;
  tiling.rows_per_tile = tiling.mixed || tiling.split ? 8 : rows_per_tile;
  tiling.bounds = routing.mixed;
  if (!tiling.mixed && !tiling.split && rows_per_tile < 1)
    fail_cuda("group_by_expert", "rows_per_tile below 1", __FILE__, __LINE__);
  if (tiling.split && (tiling.bounds.split_max < 0 || tiling.bounds.split_max >= kMoePrefillTileRows))
    fail_cuda("group_by_expert", "split tiles need 0 <= split_max < 128", __FILE__, __LINE__);
  if (tiling.mixed && (tiling.bounds.n8_max < 1 || tiling.bounds.n16_max < tiling.bounds.n8_max))
    fail_cuda("group_by_expert", "mixed tiles need bounds 1 <= n8_max <= n16_max", __FILE__, __LINE__);
  return tiling;
}

}  // namespace

void launch_group_by_expert(cudaStream_t stream, const int32_t* experts, int T, int k, int rows_per_tile,
                            const MoeRouting& routing) {
  const Tiling tiling = grouping_tiling(rows_per_tile, routing);
  const int pairs = T * k;
  if (pairs <= kFusedPairs) {
    MOESERVE_CUDA_CHECK(cuda_launch(moe_group_small_kernel, 1, std::max(32, (pairs + 31) / 32 * 32), 0, stream, experts,
                                    pairs, k, tiling, routing));
    return;
  }
  MOESERVE_CUDA_CHECK(cuda_launch(moe_scan_kernel, 1, 32, 0, stream, tiling, routing));
  MOESERVE_CUDA_CHECK(cuda_launch(moe_place_kernel, (pairs + 255) / 256, 256, 0, stream, experts, pairs, k, routing));
}

void launch_route_top_k_and_group(cudaStream_t stream, const float* logits, int T, int E, int k, int32_t* experts,
                                  float* weights, int rows_per_tile, const MoeRouting& routing) {
  if (T < 0 || !route_group_fused_fits(T, k, E))
    fail_cuda("route_top_k_and_group", "more tokens, experts or top-k than route_group_fused_fits allows", __FILE__,
              __LINE__);
  if ((routing.router_experts > 0 ? routing.router_experts : routing.num_experts) != E)
    fail_cuda("route_top_k_and_group", "the routing's router_experts differ from the logits' E", __FILE__, __LINE__);
  const Tiling tiling = grouping_tiling(rows_per_tile, routing);
  MOESERVE_CUDA_CHECK(cuda_launch(route_group_kernel, 1, 32 * std::clamp(T, 1, 32), 0, stream, logits, T, E, k,
                                  experts, weights, tiling, routing));
}

bool router_route_group_fused_supported(int T, int64_t in_features, int E, int k) {
  return T >= 1 && dense_gemv_supported(T, in_features) && route_group_fused_fits(T, k, E);
}

void launch_router_route_and_group(cudaStream_t stream, const void* x, int T, const void* weight, int64_t in_features,
                                   const float* bias, int E, int k, float* logits, int32_t* experts, float* weights,
                                   int rows_per_tile, const MoeRouting& routing, int32_t* counter) {
  if (!router_route_group_fused_supported(T, in_features, E, k))
    fail_cuda("router_route_and_group", "1-4 tokens, at most 4096 inputs (a multiple of 8), at most 256 experts and "
              "top-8", __FILE__, __LINE__);
  if ((routing.router_experts > 0 ? routing.router_experts : routing.num_experts) != E)
    fail_cuda("router_route_and_group", "the routing's router_experts differ from the router's E", __FILE__, __LINE__);
  const Tiling tiling = grouping_tiling(rows_per_tile, routing);
  const auto* xb = static_cast<const bf16*>(x);
  const auto* wb = static_cast<const bf16*>(weight);
  const int K = static_cast<int>(in_features), blocks = ceil_div(E, kDenseGemvWarps), threads = kDenseGemvWarps * 32;
  switch (T) {
    case 1:
      MOESERVE_CUDA_CHECK(cuda_launch(router_route_group_kernel<1>, blocks, threads, 0, stream, xb, K, wb, bias, E, k,
                                      logits, experts, weights, tiling, routing, counter));
      break;
    case 2:
      MOESERVE_CUDA_CHECK(cuda_launch(router_route_group_kernel<2>, blocks, threads, 0, stream, xb, K, wb, bias, E, k,
                                      logits, experts, weights, tiling, routing, counter));
      break;
    case 3:
      MOESERVE_CUDA_CHECK(cuda_launch(router_route_group_kernel<3>, blocks, threads, 0, stream, xb, K, wb, bias, E, k,
                                      logits, experts, weights, tiling, routing, counter));
      break;
    default:
      MOESERVE_CUDA_CHECK(cuda_launch(router_route_group_kernel<4>, blocks, threads, 0, stream, xb, K, wb, bias, E, k,
                                      logits, experts, weights, tiling, routing, counter));
      break;
  }
}

}  // namespace moeserve::cuda
