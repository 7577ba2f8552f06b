#include "runner/cpu/deepseek_v3_runner.h"

#include <algorithm>

#include "runner/cpu/ops.h"
#include "runner/cpu/step_tokens.h"
#include "runner/cpu/tensor_parallel_runner.h"
#include "runner/parallel/rank_shard.h"
#include "util/error.h"

namespace moeserve {

DeepseekV3CpuRunner::DeepseekV3CpuRunner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, size_t threads,
                                         cpu::MlaForm form)
    : checkpoint_(std::move(checkpoint)),
      engine_config_(checkpoint_->config().engine_view()),
      pool_(threads),
      attention_(checkpoint_->config(), form) {}

DeepseekV3CpuRunner::DeepseekV3CpuRunner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, size_t threads,
                                         Communicator& communicator)
    : DeepseekV3CpuRunner(std::move(checkpoint), threads) {
  const IndexRange experts =
      split_range(checkpoint_->config().n_routed_experts, communicator.size(), communicator.rank());
  communicator_ = &communicator;
  share_ = {static_cast<int>(experts.begin), static_cast<int>(experts.end), communicator.rank() == 0};
}

size_t DeepseekV3CpuRunner::kv_block_bytes(int block_size) const {
  // One KV group of every layer, one latent of latent_width() floats a token a layer (engine_view's kv_tensors 1).
  return kv_groups_of(engine_config_).block_bytes(block_size, sizeof(float));
}

void DeepseekV3CpuRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  MOESERVE_CHECK(layout.block_size > 0 && layout.num_blocks > 0, "KV cache needs a positive block size and count");
  layout_ = layout;
  kv_cache_.assign(kv_block_bytes(layout.block_size) / sizeof(float) * layout.num_blocks, 0.0f);
}

float* DeepseekV3CpuRunner::latent_slot(int layer, std::span<const int32_t> table, int32_t slot) {
  const int64_t logical = slot / layout_.block_size;
  MOESERVE_CHECK(logical < static_cast<int64_t>(table.size()), "block table has {} blocks, slot {} needs {}",
                 table.size(), slot, logical + 1);
  const int32_t block = table[logical];
  MOESERVE_CHECK(block >= 0 && block < layout_.num_blocks, "KV block {} for slot {} is not in the pool of {}", block,
                 slot, layout_.num_blocks);
  const deepseek_v3::Config& c = checkpoint_->config();
  const int64_t offset =
      ((static_cast<int64_t>(block) * c.num_layers + layer) * layout_.block_size + slot % layout_.block_size) *
      c.latent_width();
  return kv_cache_.data() + offset;
}

void DeepseekV3CpuRunner::move_kv_slots(std::span<const std::span<const int32_t>> block_tables,
                                        std::span<const KvSlotMove> moves) {
  MOESERVE_CHECK(block_tables.size() == 1, "{} block tables for 1 KV group", block_tables.size());
  const deepseek_v3::Config& c = checkpoint_->config();
  for (const KvSlotMove& move : moves)
    for (int layer = 0; layer < c.num_layers; ++layer)
      std::copy_n(latent_slot(layer, block_tables[0], move.from), c.latent_width(),
                  latent_slot(layer, block_tables[0], move.to));
}

void DeepseekV3CpuRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  const deepseek_v3::Config& c = checkpoint_->config();
  const deepseek_v3::Weights& w = checkpoint_->weights();
  MOESERVE_CHECK(!kv_cache_.empty(), "forward() before allocate_kv_cache()");
  const int64_t H = c.hidden_size;
  const cpu::StepTokens step = cpu::collect_step_tokens(batch, 1, c.vocab_size, c.max_position_embeddings);
  const int64_t T = static_cast<int64_t>(step.ids.size());

  // Per token what it sees (slots of its sequence), the same in every layer; a sequence's key set is its slots
  // [0, start + tokens), so a slot is its own index in the set.
  std::vector<cpu::MlaQuery> queries(T);
  std::vector<cpu::MlaKeySet> key_sets(batch.sequences.size());
  for (int64_t t = 0; t < T; ++t) {
    const cpu::StepToken& token = step.tokens[t];
    queries[t].position = token.position;
    queries[t].key_set = token.sequence;
    cpu::key_slots(batch.sequences[token.sequence], token, 0, queries[t].visible);
  }

  std::vector<float> x(T * H), normed(T * H), delta(T * H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x[t * H + i] = w.embedding.at(step.ids[t], i);
  output.captured.assign(batch.capture_layers.size(), {});
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const deepseek_v3::Layer& l = w.layers[layer];
    for (size_t s = 0; s < batch.sequences.size(); ++s) {
      const SequenceStep& seq = batch.sequences[s];
      auto& latents = key_sets[s].latents;
      latents.clear();
      for (int32_t slot = 0; slot < seq.start_position + static_cast<int32_t>(seq.tokens.size()); ++slot)
        latents.push_back(latent_slot(layer, seq.block_tables[0], slot));
    }
    for (int64_t t = 0; t < T; ++t)
      queries[t].latent = latent_slot(layer, batch.sequences[step.tokens[t].sequence].block_tables[0], step.tokens[t].slot);
    cpu::rms_norm(x.data(), l.input_norm.data(), T, H, c.rms_norm_eps, normed.data());
    attention_.forward(pool_, l.attention, normed.data(), queries, key_sets, delta.data());
    for (int64_t i = 0; i < T * H; ++i) x[i] += delta[i];
    cpu::rms_norm(x.data(), l.post_attention_norm.data(), T, H, c.rms_norm_eps, normed.data());
    cpu::feed_forward(pool_, c, l, normed.data(), T, delta.data(), share_);
    if (communicator_ != nullptr && l.moe) communicator_->all_reduce_sum(delta);
    for (int64_t i = 0; i < T * H; ++i) x[i] += delta[i];
    for (size_t j = 0; j < batch.capture_layers.size(); ++j)
      if (batch.capture_layers[j] == layer) output.captured[j] = x;
  }

  const int64_t R = static_cast<int64_t>(step.logit_rows.size());
  normed.resize(R * H);
  for (int64_t r = 0; r < R; ++r)
    cpu::rms_norm(x.data() + step.logit_rows[r] * H, w.final_norm.data(), 1, H, c.rms_norm_eps, normed.data() + r * H);
  output.rows = R;
  output.logits.resize(R * c.vocab_size);
  cpu::linear(pool_, normed.data(), R, w.lm_head, nullptr, output.logits.data());
  cpu::sample_logit_rows(step, c.vocab_size, output);
  if (!batch.return_logits) output.logits.clear();
}

std::unique_ptr<ModelRunner> make_deepseek_cpu_runner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint,
                                                      const ParallelConfig& parallel, size_t threads) {
  check_parallel_size(parallel);
  const int n = parallel.tensor_parallel_size;
  if (n == 1) return std::make_unique<DeepseekV3CpuRunner>(std::move(checkpoint), threads);
  MOESERVE_CHECK(parallel.expert_parallel,
                 "DeepSeek-V3 models split by experts only so far: add --enable-expert-parallel to "
                 "--tensor-parallel-size {}", n);
  const int experts = checkpoint->config().n_routed_experts;
  MOESERVE_CHECK(experts >= n, "{} routed experts cannot be placed over {} expert-parallel ranks", experts, n);
  return std::make_unique<TensorParallelCpuRunner>(n, threads, [&](int, Communicator& communicator, size_t per_rank) {
    return std::make_unique<DeepseekV3CpuRunner>(checkpoint, per_rank, communicator);
  });
}

}  // namespace moeserve
