#include "runner/cuda/cuda_drafter_pool.h"

#include <algorithm>

#include "runner/cuda/cuda_check.h"
#include "util/error.h"

namespace moeserve::cuda {

int64_t drafter_pool_blocks(const CudaDrafterOptions& options, size_t block_bytes, std::string_view owner) {
  // Checked before the cap divides by the block's bytes (a block size of 0 made them 0).
  MOESERVE_CHECK(options.block_size > 0 && block_bytes > 0,
                 "{}: KV pool needs a positive block size and count (got {} x {})", owner, options.num_blocks,
                 options.block_size);
  int64_t blocks = options.num_blocks;
  if (options.max_memory_fraction > 0) {
    const size_t free_bytes = device_memory().free;
    blocks = std::min(blocks, static_cast<int64_t>(options.max_memory_fraction * static_cast<double>(free_bytes) /
                                                   static_cast<double>(block_bytes)));
  }
  MOESERVE_CHECK(blocks > 0, "{}: KV pool needs a positive block size and count (got {} x {})", owner, blocks,
                 options.block_size);
  return blocks;
}

}  // namespace moeserve::cuda
