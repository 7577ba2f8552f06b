// The collectives that the ranks of a tensor- or expert-parallel runner exchange, and the layout that says which
// slice of the model each rank holds. One interface, two implementations: InProcessGroup (in_process_group.h)
// joins N ranks that run on threads of one process over host memory, so the sharding logic runs on the CPU runner
// in CI; NcclGroup (runner/cuda/nccl_group.h) joins one rank per local GPU over device memory through NCCL.
//
// Every rank of a group calls the same collectives in the same order with the same sizes; a rank that fails
// aborts its group, so that the others raise instead of waiting for it forever. Data lives where the ranks compute:
// host memory for InProcessGroup, the rank's GPU memory (enqueued on the rank's stream) for NcclGroup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace moeserve {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `data` over the ranks, in place. Every rank receives the same bits, which differ from a sum on one rank only
  // by fp32 rounding: InProcessGroup adds the ranks' values in rank order (deterministic), NCCL in its ring's order.
  virtual void all_reduce_sum(std::span<float> data) = 0;
  // Concatenates the ranks' `mine` in rank order into `all` (size() * mine.size() bytes; every rank gives the same
  // number of bytes).
  virtual void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) = 0;
  // Makes every rank's collectives fail with `why` (the rank that fails calls it; the others then raise).
  virtual void abort(const std::string& why) = 0;
};

// vLLM's parallelism flags: --tensor-parallel-size N splits the attention heads (query and KV heads alike), the
// experts' intermediate dimension in whole MXFP4 blocks of 32, and the unembedding by vocabulary over N ranks;
// --enable-expert-parallel places whole experts on the ranks instead of splitting each one.
struct ParallelConfig {
  int tensor_parallel_size = 1;
  bool expert_parallel = false;
};

// [begin, end) of a range of `total` items split into `parts` near-equal contiguous pieces (the first
// total % parts pieces one longer), piece `index`.
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
};
IndexRange split_range(int64_t total, int parts, int index);

}  // namespace moeserve
