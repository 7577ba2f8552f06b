// The size of a GPU draft head's own KV pool (eagle3_cuda_drafter.h, deepseek_mtp_cuda_drafter.h), one rule for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runner/cuda/cuda_drafter_factory.h"

namespace moeserve::cuda {

// The pool's block count: the options' (as many token slots as the target's pool, when the engine makes it),
// capped by options.max_memory_fraction of the current device's free memory in blocks of `block_bytes` (the
// head's own). Fails, naming `owner`, unless the block size and the count are positive.
int64_t drafter_pool_blocks(const CudaDrafterOptions& options, size_t block_bytes, std::string_view owner);

}  // namespace moeserve::cuda
