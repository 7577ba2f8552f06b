#include "runner/cuda/tensor_parallel_cuda_runner.h"

#include <algorithm>

#include "runner/cpu/rank_weights.h"
#include "runner/cuda/cuda_check.h"
#include "runner/parallel/rank_shard.h"
#include "runner/parallel/run_ranks.h"
#include "util/error.h"

namespace moeserve::cuda {

TensorParallelCudaRunner::TensorParallelCudaRunner(ModelConfig config, std::unique_ptr<DeviceRankGroup> group,
                                                   std::vector<std::unique_ptr<CudaRunner>> ranks)
    : config_(std::move(config)),
      group_(std::move(group)),
      ranks_(std::move(ranks)),
      rank_threads_(ranks_.size()) {
  MOESERVE_CHECK(!ranks_.empty() && group_ != nullptr && group_->size() == size(),
                 "a tensor-parallel CUDA runner of {} ranks over a group of {}", ranks_.size(),
                 group_ ? group_->size() : 0);
}

TensorParallelCudaRunner::~TensorParallelCudaRunner() {
  // Each rank's buffers, streams and graphs belong to its device.
  for (int r = 0; r < size(); ++r) {
    cudaSetDevice(group_->device(r));
    ranks_[r].reset();
  }
}

void TensorParallelCudaRunner::on_every_rank(const std::function<void(int)>& body) {
  run_ranks(
      rank_threads_, size(),
      [&](int r) {
        MOESERVE_CUDA_CHECK(cudaSetDevice(group_->device(r)));
        body(r);
      },
      [&](int r) -> Communicator& { return group_->rank(r); });
}

size_t TensorParallelCudaRunner::kv_block_bytes(int block_size) const { return ranks_.front()->kv_block_bytes(block_size); }

size_t TensorParallelCudaRunner::device_memory_free() const {
  size_t least = SIZE_MAX;
  for (int r = 0; r < size(); ++r) {
    MOESERVE_CUDA_CHECK(cudaSetDevice(group_->device(r)));
    least = std::min(least, ranks_[r]->device_memory_free());
  }
  return least;
}

size_t TensorParallelCudaRunner::device_memory_total() const {
  MOESERVE_CUDA_CHECK(cudaSetDevice(group_->device(0)));
  return ranks_.front()->device_memory_total();
}

void TensorParallelCudaRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  on_every_rank([&](int r) { ranks_[r]->allocate_kv_cache(layout); });
}

void TensorParallelCudaRunner::fill_kv_cache_random(uint64_t seed) {
  on_every_rank([&](int r) { ranks_[r]->fill_kv_cache_random(seed); });
}

size_t TensorParallelCudaRunner::weight_bytes() const {
  size_t bytes = 0;
  for (const auto& rank : ranks_) bytes += rank->weight_bytes();
  return bytes;
}

void TensorParallelCudaRunner::move_kv_slots(std::span<const std::span<const int32_t>> block_tables,
                                             std::span<const KvSlotMove> moves) {
  on_every_rank([&](int r) { ranks_[r]->move_kv_slots(block_tables, moves); });
}

// The step is checked once, on the caller's thread, before any rank starts: a bad step fails here and the group
// stays usable (an NCCL communicator does not survive an abort, which only a device failure inside a step causes).
void TensorParallelCudaRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  MOESERVE_CUDA_CHECK(cudaSetDevice(group_->device(0)));
  ranks_.front()->check_batch(batch);
  std::vector<ForwardOutput> outputs(size() - 1);
  on_every_rank([&](int r) { ranks_[r]->forward(batch, r == 0 ? output : outputs[r - 1]); });
}

DeviceWeights upload_rank_weights(const Checkpoint& checkpoint, const ModelConfig& rank_config, const RankShard& shard,
                                  Precision precision) {
  const cpu::RankWeights slice(checkpoint.weights(), checkpoint.config(), shard, cpu::Vocabulary::sliced);
  return DeviceWeights::upload(rank_config, slice.weights(), precision,
                               fmt::format("{} (rank {} of {})", checkpoint.directory(), shard.rank, shard.size),
                               static_cast<int>(shard.experts.begin), static_cast<int>(shard.experts.size()));
}

std::unique_ptr<ModelRunner> make_tensor_parallel_cuda_runner(
    const ModelConfig& config, const ParallelConfig& parallel, std::unique_ptr<DeviceRankGroup> group,
    const std::function<DeviceWeights(const ModelConfig&, const RankShard&)>& weights_of, Precision precision,
    const CudaRunnerOptions& options, const KvScales& scales) {
  check_parallel_config(config, parallel);
  MOESERVE_CHECK(group->size() == parallel.tensor_parallel_size, "--tensor-parallel-size {} over a group of {} GPUs",
                 parallel.tensor_parallel_size, group->size());
  std::vector<std::unique_ptr<CudaRunner>> ranks;
  for (int r = 0; r < parallel.tensor_parallel_size; ++r) {
    select_cuda_device(group->device(r));
    const RankShard shard = rank_shard(config, parallel, r);
    const ModelConfig rank_config = rank_model_config(config, shard);
    CudaRunnerOptions rank_options = options;
    rank_options.device = group->device(r);
    rank_options.cuda_graphs = options.cuda_graphs && group->graph_capturable();
    rank_options.first_expert = static_cast<int>(shard.experts.begin);
    rank_options.local_experts = static_cast<int>(shard.experts.size());
    auto rank = std::make_unique<CudaRunner>(rank_config, weights_of(rank_config, shard), precision, rank_options,
                                             scales);
    group->use_stream(r, rank->stream());
    rank->join_group(&group->rank(r), shard.vocab);
    ranks.push_back(std::move(rank));
  }
  return std::make_unique<TensorParallelCudaRunner>(config, std::move(group), std::move(ranks));
}

}  // namespace moeserve::cuda
