// A model over N ranks in one process (vLLM's --tensor-parallel-size, --enable-expert-parallel): N CPU runners,
// each holding its rank's slice of the model and of the KV cache (GPT-OSS: runner/parallel/rank_shard.h; DeepSeek:
// its routed experts, deepseek_v3_runner.h), run a step together on N threads and sum through an InProcessGroup. To the engine it is one runner: one KV block pool (a
// block holds every rank's slice of it), one output, the same tokens as one rank would give. It is the CPU
// counterpart of the multi-GPU runner, so the sharding is proven in CI against the single runner.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/parallel/in_process_group.h"
#include "runner/runner.h"
#include "util/thread_pool.h"

namespace moeserve {

class TensorParallelCpuRunner : public ModelRunner {
 public:
  // Rank r of `ranks`, joined to the group by `communicator`, with `threads` CPU threads of its own.
  using RankMaker = std::function<std::unique_ptr<ModelRunner>(int rank, Communicator& communicator, size_t threads)>;
  // threads: CPU threads in all (0: one per hardware thread), shared out over the ranks.
  TensorParallelCpuRunner(int ranks, size_t threads, const RankMaker& make_rank);
  // GPT-OSS: CpuRunner ranks of rank_shard's slices.
  TensorParallelCpuRunner(std::shared_ptr<const Checkpoint> checkpoint, const ParallelConfig& parallel,
                          size_t threads = 0);

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return ranks_.front()->config(); }
  size_t kv_block_bytes(int block_size) const override;
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return ranks_.front()->kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;
  void move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) override;

  int size() const { return static_cast<int>(ranks_.size()); }

 private:
  InProcessGroup group_;
  std::vector<std::unique_ptr<ModelRunner>> ranks_;
  ThreadPool rank_threads_;  // one thread a rank (the caller's among them)
};

// The CPU runner for --tensor-parallel-size / --enable-expert-parallel: a CpuRunner when the size is 1.
std::unique_ptr<ModelRunner> make_cpu_runner(std::shared_ptr<const Checkpoint> checkpoint,
                                             const ParallelConfig& parallel, size_t threads);

}  // namespace moeserve
