#include "runner/cpu/tensor_parallel_runner.h"

#include <algorithm>
#include <thread>

#include "runner/parallel/run_ranks.h"
#include "util/error.h"

namespace moeserve {

namespace {

size_t threads_per_rank(size_t threads, int ranks) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, threads / static_cast<size_t>(ranks));
}

}  // namespace

TensorParallelCpuRunner::TensorParallelCpuRunner(int ranks, size_t threads, const RankMaker& make_rank)
    : group_(ranks), rank_threads_(static_cast<size_t>(ranks)) {
  const size_t per_rank = threads_per_rank(threads, ranks);
  for (int r = 0; r < ranks; ++r) ranks_.push_back(make_rank(r, group_.rank(r), per_rank));
}

TensorParallelCpuRunner::TensorParallelCpuRunner(std::shared_ptr<const Checkpoint> checkpoint,
                                                 const ParallelConfig& parallel, size_t threads)
    : TensorParallelCpuRunner(parallel.tensor_parallel_size, threads,
                              [&](int r, Communicator& communicator, size_t per_rank) {
                                return std::make_unique<CpuRunner>(
                                    checkpoint, per_rank, rank_shard(checkpoint->config(), parallel, r), &communicator);
                              }) {}

size_t TensorParallelCpuRunner::kv_block_bytes(int block_size) const {
  size_t bytes = 0;
  for (const auto& rank : ranks_) bytes += rank->kv_block_bytes(block_size);
  return bytes;
}

void TensorParallelCpuRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  for (auto& rank : ranks_) rank->allocate_kv_cache(layout);
}

void TensorParallelCpuRunner::move_kv_slots(std::span<const std::span<const int32_t>> block_tables,
                                            std::span<const KvSlotMove> moves) {
  for (auto& rank : ranks_) rank->move_kv_slots(block_tables, moves);
}

// Every rank at once (run_ranks); a failed step leaves the group reset for the next one.
void TensorParallelCpuRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  std::vector<ForwardOutput> outputs(size() - 1);
  try {
    run_ranks(
        rank_threads_, size(), [&](int r) { ranks_[r]->forward(batch, r == 0 ? output : outputs[r - 1]); },
        [&](int r) -> Communicator& { return group_.rank(r); });
  } catch (...) {
    group_.reset();
    throw;
  }
}

std::unique_ptr<ModelRunner> make_cpu_runner(std::shared_ptr<const Checkpoint> checkpoint,
                                             const ParallelConfig& parallel, size_t threads) {
  if (parallel.tensor_parallel_size == 1 && !parallel.expert_parallel)
    return std::make_unique<CpuRunner>(std::move(checkpoint), threads);
  return std::make_unique<TensorParallelCpuRunner>(std::move(checkpoint), parallel, threads);
}

}  // namespace moeserve
