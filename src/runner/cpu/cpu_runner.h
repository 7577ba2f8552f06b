// The CPU reference runner: the whole GPT-OSS forward in fp32 over a paged fp32 KV cache, multithreaded.
// It is the numerical reference for the CUDA runner and is itself proven against transformers.
// Given a rank of a tensor- or expert-parallel group (runner/parallel/rank_shard.h), it holds and computes that
// rank's slice of the model and its slice of the KV cache, and sums with the other ranks through the group's
// Communicator; TensorParallelCpuRunner (tensor_parallel_runner.h) drives such ranks as one runner.
#pragma once

#include <memory>
#include <vector>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/ops.h"
#include "runner/cpu/rank_weights.h"
#include "runner/cpu/step_tokens.h"
#include "runner/parallel/communicator.h"
#include "runner/parallel/rank_shard.h"
#include "runner/runner.h"
#include "util/thread_pool.h"

namespace moeserve {

class CpuRunner : public ModelRunner {
 public:
  // threads == 0: one per hardware thread.
  CpuRunner(std::shared_ptr<const Checkpoint> checkpoint, size_t threads = 0);
  // One rank of a parallel group: `communicator` joins it to the other ranks (needed when shard.size > 1).
  CpuRunner(std::shared_ptr<const Checkpoint> checkpoint, size_t threads, const RankShard& shard,
            Communicator* communicator);

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return checkpoint_->config(); }
  size_t kv_block_bytes(int block_size) const override;
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;
  void move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) override;

  // How often the SwiGLU clamp was reached (the tiny model is built so that it is).
  const cpu::SwigluCounters& swiglu_counters() const { return swiglu_counters_; }

 private:
  void attention_layer(int layer, const ForwardBatch& batch, const cpu::StepTokens& tokens);
  void moe_layer(int layer, int64_t T);
  void logits(const ForwardBatch& batch, const cpu::StepTokens& step, ForwardOutput& output);
  float* kv_slot(int layer, std::span<const std::span<const int32_t>> block_tables, int32_t slot, int kv);

  std::shared_ptr<const Checkpoint> checkpoint_;
  RankShard shard_;
  Communicator* communicator_ = nullptr;  // null for a runner alone
  std::unique_ptr<cpu::RankWeights> rank_weights_;  // this rank's slice when it is one of several
  const ModelWeights* weights_ = nullptr;           // the checkpoint's own, or the slice
  ThreadPool pool_;
  KvGroups groups_;  // with this rank's share of the KV heads
  int heads_ = 0, kv_heads_ = 0;  // this rank's query and KV heads
  int64_t kv_dim_ = 0;           // kv_heads_ * head_dim
  std::vector<float> inv_freq_;
  KvCacheLayout layout_;
  int max_layers_per_group_ = 0;
  std::vector<float> kv_cache_;
  cpu::SwigluCounters swiglu_counters_;

  // Activations of the step in flight, [T, width].
  std::vector<float> x_, normed_, q_, k_, v_, attn_, proj_, moe_out_, local_logits_;
};

}  // namespace moeserve
