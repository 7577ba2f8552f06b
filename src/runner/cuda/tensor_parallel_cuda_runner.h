// GPT-OSS over N GPUs of one host (vLLM's --tensor-parallel-size): one CudaRunner a rank, each with its rank's slice
// of the weights (runner/parallel/rank_shard.h, the unembedding split by vocabulary as on the CPU ranks) and its
// slice of every KV block, driven from one process by one thread a rank. Each step, every rank runs the same kernels
// on its slice and sums the attention output and the experts' outputs with the others through its group (NCCL),
// inside the decode graphs too. Each rank's logits are its vocabulary slice's: the greedy token comes from a
// distributed argmax (runner/parallel/vocab_best.h, in the step and its graph), and steps whose rows need whole
// logits gather the slices into whole rows on every rank after the step (CudaRunner::join_group says how), so the
// token chosen is the one GPU's. To the engine it is one runner with one pool of blocks: each GPU
// holds every block's slice of its KV heads, so a block costs each GPU a rank's share.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cuda/cuda_runner.h"
#include "runner/cuda/device_rank_group.h"
#include "runner/parallel/rank_shard.h"
#include "runner/runner.h"
#include "util/thread_pool.h"

namespace moeserve::cuda {

class TensorParallelCudaRunner : public ModelRunner {
 public:
  // ranks[r] runs on group->device(r) and has joined group->rank(r).
  TensorParallelCudaRunner(ModelConfig config, std::unique_ptr<DeviceRankGroup> group,
                           std::vector<std::unique_ptr<CudaRunner>> ranks);
  ~TensorParallelCudaRunner() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return config_; }
  // What a block costs each GPU (every GPU holds its slice of every block, and the same number of blocks).
  size_t kv_block_bytes(int block_size) const override;
  size_t device_memory_free() const override;   // the least any rank's GPU has free
  size_t device_memory_total() const override;  // rank 0's GPU
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return ranks_.front()->kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;
  void move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) override;

  int size() const { return static_cast<int>(ranks_.size()); }
  CudaRunner& rank(int r) { return *ranks_.at(r); }
  // CudaRunner's benchmark calls: random KV contents on every rank, the weights of all ranks, rank 0's MoE path.
  void fill_kv_cache_random(uint64_t seed);
  size_t weight_bytes() const;
  std::string moe_path_name(int tokens) const { return ranks_.front()->moe_path_name(tokens); }

 private:
  // body(r) with rank r's device current, for every rank at once.
  void on_every_rank(const std::function<void(int)>& body);

  ModelConfig config_;
  std::unique_ptr<DeviceRankGroup> group_;
  std::vector<std::unique_ptr<CudaRunner>> ranks_;
  ThreadPool rank_threads_;
};

// Builds the ranks of `group`: rank r's weights come from weights_of(rank config, shard) with rank r's device current
// (an upload of its slice of a checkpoint, or synthetic weights of its shapes). With expert parallelism a rank's
// weights hold its share of the experts (shard.experts) and its runner groups only the pairs routed to them.
// Rank `shard`'s weights from a checkpoint (a weights_of for the builder below): its slice (runner/cpu/rank_weights.h)
// with the unembedding's rows shard.vocab alone, and of the experts only its own when expert parallel.
DeviceWeights upload_rank_weights(const Checkpoint& checkpoint, const ModelConfig& rank_config, const RankShard& shard,
                                  Precision precision);

std::unique_ptr<ModelRunner> make_tensor_parallel_cuda_runner(
    const ModelConfig& config, const ParallelConfig& parallel, std::unique_ptr<DeviceRankGroup> group,
    const std::function<DeviceWeights(const ModelConfig&, const RankShard&)>& weights_of, Precision precision,
    const CudaRunnerOptions& options, const KvScales& scales);

}  // namespace moeserve::cuda
