// The CPU reference runner for the DeepSeek-V3 family (DeepSeek-V3, DeepSeek-R1): the whole forward in fp32 over
// FP8 or bf16 weights read in place, with a paged cache of MLA latents (576 values per token and layer for R1),
// multithreaded. Behind the same ModelRunner interface as the GPT-OSS runner: one KV group (every layer is full
// attention), causal runs and verification trees, move_kv_slots. It is proven against transformers'
// DeepseekV3ForCausalLM (tests/fixtures/oracle/deepseek_v3_*, written by tools/oracle/deepseek_v3_logits.py).
//
// embed -> per layer: x += MLA(input_norm(x)); x += FFN(post_attention_norm(x)) -> lm_head(norm(x)).
#pragma once

#include <memory>
#include <vector>

#include "model/deepseek_v3/checkpoint.h"
#include "runner/cpu/deepseek_v3_ffn.h"
#include "runner/cpu/mla.h"
#include "runner/parallel/communicator.h"
#include "runner/runner.h"
#include "util/thread_pool.h"

namespace moeserve {

class DeepseekV3CpuRunner : public ModelRunner {
 public:
  // threads == 0: one per hardware thread. form: the MLA form attention runs in (both give the same logits
  // within fp32 rounding; absorbed reads only the cached latents, naive expands keys and values as transformers).
  DeepseekV3CpuRunner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, size_t threads = 0,
                      cpu::MlaForm form = cpu::MlaForm::absorbed);
  // One rank of an expert-parallel group (--enable-expert-parallel, the layout SGLang and TensorRT-LLM serve R1
  // with): attention and the dense layers whole on every rank, each MoE layer's routed experts split into
  // contiguous shares (split_range), the shared expert on rank 0, the MoE output summed over the ranks.
  DeepseekV3CpuRunner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, size_t threads,
                      Communicator& communicator);

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return engine_config_; }
  size_t kv_block_bytes(int block_size) const override;
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;
  void move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) override;

  const std::shared_ptr<const deepseek_v3::Checkpoint>& checkpoint() const { return checkpoint_; }

 private:
  // The latent of `layer` at `slot` of a sequence whose block table is `table`.
  float* latent_slot(int layer, std::span<const int32_t> table, int32_t slot);

  std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint_;
  ModelConfig engine_config_;
  Communicator* communicator_ = nullptr;  // null alone
  cpu::ExpertShare share_;                // this rank's routed experts and whether it runs the shared one
  ThreadPool pool_;
  cpu::MlaAttention attention_;
  KvCacheLayout layout_;
  std::vector<float> kv_cache_;  // [num_blocks, num_layers, block_size, latent_width]
};

// The DeepSeek CPU runner for --tensor-parallel-size N --enable-expert-parallel: N expert-parallel ranks
// (TensorParallelCpuRunner), or one runner when N is 1. DeepSeek splits by experts only so far.
std::unique_ptr<ModelRunner> make_deepseek_cpu_runner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint,
                                                      const ParallelConfig& parallel, size_t threads);

}  // namespace moeserve
