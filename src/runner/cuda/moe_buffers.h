// Device buffers behind a MoeRouting (moe_grouping.cu), sized for a step of T tokens with top-k experts.
#pragma once

#include <algorithm>
#include <utility>

#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

class MoeBuffers {
 public:
  // Returns true when any buffer was reallocated. num_experts of the router's router_experts from first_expert are
  // this runner's (all of them unless expert parallel).
  bool grow(int tokens, int top_k, int num_experts, int first_expert = 0, int router_experts = 0) {
    const size_t rows = static_cast<size_t>(tokens) * top_k, E = num_experts;
    const size_t counted = std::max(router_experts, num_experts);
    // Tiles of the smallest size (8 rows) are the most numerous (mixed tiling's too: each expert's are at most its
    // 8-row ones).
    const size_t tiles = moe_max_tiles(static_cast<int>(rows), 8, num_experts);
    num_experts_ = num_experts;
    first_expert_ = first_expert;
    router_experts_ = static_cast<int>(counted);
    bool moved = false;
    for (auto [buffer, count] : {std::pair{&counts_, counted}, {&offsets_, E + 1}, {&fill_, E}, {&row_token_, rows},
                                 {&row_expert_, rows}, {&slot_row_, rows}, {&tile_expert_, tiles},
                                 {&tile_row0_, tiles}, {&num_tiles_, size_t{4}}})
      moved |= buffer->grow(std::max<size_t>(count, 1) * sizeof(int32_t));
    if (moved) MOESERVE_CUDA_CHECK(cudaMemset(counts_.get(), 0, counts_.bytes()));  // the router adds onto zero
    return moved;
  }

  MoeRouting routing() const {
    MoeRouting r;
    r.num_experts = num_experts_;
    r.first_expert = first_expert_;
    r.router_experts = router_experts_;
    r.expert_counts = counts_.as<int32_t>();
    r.expert_offsets = offsets_.as<int32_t>();
    r.expert_fill = fill_.as<int32_t>();
    r.row_token = row_token_.as<int32_t>();
    r.row_expert = row_expert_.as<int32_t>();
    r.slot_row = slot_row_.as<int32_t>();
    r.tile_expert = tile_expert_.as<int32_t>();
    r.tile_row0 = tile_row0_.as<int32_t>();
    r.num_tiles = num_tiles_.as<int32_t>();
    return r;
  }

 private:
  int num_experts_ = 0, first_expert_ = 0, router_experts_ = 0;
  DeviceBuffer counts_, offsets_, fill_, row_token_, row_expert_, slot_row_, tile_expert_, tile_row0_, num_tiles_;
};

}  // namespace moeserve::cuda
