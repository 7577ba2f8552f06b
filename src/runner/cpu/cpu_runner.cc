#include "runner/cpu/cpu_runner.h"

#include <algorithm>
#include <cmath>

#include "runner/cpu/vocab_parallel.h"
#include "util/bfloat16.h"
#include "util/error.h"

namespace moeserve {

CpuRunner::CpuRunner(std::shared_ptr<const Checkpoint> checkpoint, size_t threads)
    : CpuRunner(checkpoint, threads, rank_shard(checkpoint->config(), {}, 0), nullptr) {}

CpuRunner::CpuRunner(std::shared_ptr<const Checkpoint> checkpoint, size_t threads, const RankShard& shard,
                     Communicator* communicator)
    : checkpoint_(std::move(checkpoint)),
      shard_(shard),
      communicator_(communicator),
      pool_(threads),
      groups_(kv_groups_of(checkpoint_->config())),
      inv_freq_(rope_inverse_frequencies(checkpoint_->config())) {
  const ModelConfig& c = checkpoint_->config();
  MOESERVE_CHECK(shard.size == 1 || (communicator != nullptr && communicator->size() == shard.size &&
                                     communicator->rank() == shard.rank),
                 "rank {} of {} needs a communicator of its group", shard.rank, shard.size);
  if (shard.size == 1) {
    weights_ = &checkpoint_->weights();
  } else {
    rank_weights_ = std::make_unique<cpu::RankWeights>(checkpoint_->weights(), c, shard);
    weights_ = &rank_weights_->weights();
  }
  heads_ = static_cast<int>(shard.heads.size());
  kv_heads_ = static_cast<int>(shard.kv_heads.size());
  kv_dim_ = static_cast<int64_t>(kv_heads_) * c.head_dim;
  for (int& values : groups_.values_per_token_of_group) values = values / c.num_kv_heads * kv_heads_;
  max_layers_per_group_ = groups_.max_layers_per_group();
}

size_t CpuRunner::kv_block_bytes(int block_size) const {
  return groups_.block_bytes(block_size, sizeof(float));  // [layer slot][K, V][token][kv_dim] floats
}

void CpuRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  MOESERVE_CHECK(layout.block_size > 0 && layout.num_blocks > 0, "KV cache needs a positive block size and count");
  layout_ = layout;
  kv_cache_.assign(kv_block_bytes(layout.block_size) / sizeof(float) * layout.num_blocks, 0.0f);
}

// K (kv = 0) or V (kv = 1) of `layer` at `slot` of a sequence: [kv_heads, head_dim] floats.
float* CpuRunner::kv_slot(int layer, std::span<const std::span<const int32_t>> block_tables, int32_t slot, int kv) {
  const int group = groups_.group_of_layer[layer];
  const auto& table = block_tables[group];
  const int64_t logical = slot / layout_.block_size;
  MOESERVE_CHECK(logical < static_cast<int64_t>(table.size()), "block table of KV group {} has {} blocks, slot {} needs {}",
                 group, table.size(), slot, logical + 1);
  const int32_t block = table[logical];
  MOESERVE_CHECK(block >= 0 && block < layout_.num_blocks, "KV block {} for slot {} is not in the pool of {}", block,
                 slot, layout_.num_blocks);
  const int64_t offset =
      (((static_cast<int64_t>(block) * max_layers_per_group_ + groups_.slot_of_layer[layer]) * 2 + kv) *
           layout_.block_size +
       slot % layout_.block_size) *
      kv_dim_;
  return kv_cache_.data() + offset;
}

void CpuRunner::move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) {
  MOESERVE_CHECK(static_cast<int>(block_tables.size()) == groups_.num_groups(), "{} block tables for {} KV groups",
                 block_tables.size(), groups_.num_groups());
  for (const KvSlotMove& move : moves)
    for (int layer = 0; layer < config().num_layers; ++layer)
      for (int kv = 0; kv < 2; ++kv)
        std::copy_n(kv_slot(layer, block_tables, move.from, kv), kv_dim_, kv_slot(layer, block_tables, move.to, kv));
}

void CpuRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  const ModelConfig& c = config();
  const ModelWeights& w = *weights_;
  MOESERVE_CHECK(!kv_cache_.empty(), "forward() before allocate_kv_cache()");
  const int64_t H = c.hidden_size;

  const cpu::StepTokens step = cpu::collect_step_tokens(batch, groups_.num_groups(), c.vocab_size,
                                                        c.max_position_embeddings);
  const std::vector<int32_t>& ids = step.ids;
  const int64_t T = static_cast<int64_t>(ids.size());

  x_.resize(T * H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x_[t * H + i] = w.embedding.at(ids[t], i);

  output.captured.assign(batch.capture_layers.size(), {});
  for (int layer = 0; layer < c.num_layers; ++layer) {
    attention_layer(layer, batch, step);
    moe_layer(layer, T);
    for (size_t j = 0; j < batch.capture_layers.size(); ++j)
      if (batch.capture_layers[j] == layer) output.captured[j].assign(x_.begin(), x_.end());
  }

  logits(batch, step, output);
}

// Logits rows: the last num_logits tokens of each sequence. A rank computes its slice of the vocabulary; the
// slices are gathered into whole rows unless every row is only drawn greedily (vocab_parallel.h).
void CpuRunner::logits(const ForwardBatch& batch, const cpu::StepTokens& step, ForwardOutput& output) {
  const ModelConfig& c = config();
  const ModelWeights& w = *weights_;
  const int64_t H = c.hidden_size;
  const std::vector<int64_t>& rows = step.logit_rows;
  const int64_t R = static_cast<int64_t>(rows.size());
  normed_.resize(R * H);
  for (int64_t r = 0; r < R; ++r)
    cpu::rms_norm(x_.data() + rows[r] * H, w.final_norm.data(), 1, H, c.rms_norm_eps, normed_.data() + r * H);
  output.rows = R;
  if (communicator_ == nullptr) {
    output.logits.resize(R * c.vocab_size);
    cpu::linear(pool_, normed_.data(), R, w.unembedding, nullptr, output.logits.data());
  } else {
    local_logits_.resize(R * shard_.vocab.size());
    cpu::linear(pool_, normed_.data(), R, w.unembedding, nullptr, local_logits_.data());
    if (!cpu::needs_whole_logits(batch, step)) {
      output.logits.clear();
      output.logprobs.clear();
      output.sampled = cpu::vocab_parallel_greedy(*communicator_, step, local_logits_, c.vocab_size);
      return;
    }
    cpu::gather_vocab_rows(*communicator_, local_logits_, R, c.vocab_size, output.logits);
  }
  cpu::sample_logit_rows(step, c.vocab_size, output);
  if (!batch.return_logits) output.logits.clear();
}

void CpuRunner::attention_layer(int layer, const ForwardBatch& batch, const cpu::StepTokens& step_tokens) {
  const ModelConfig& c = config();
  const std::vector<cpu::StepToken>& tokens = step_tokens.tokens;
  const LayerWeights& w = weights_->layers[layer];
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int D = c.head_dim;
  const int64_t H = c.hidden_size, Q = static_cast<int64_t>(heads_) * D, KV = kv_dim_;

  normed_.resize(T * H);
  cpu::rms_norm(x_.data(), w.attn_norm.data(), T, H, c.rms_norm_eps, normed_.data());
  q_.resize(T * Q);
  k_.resize(T * KV);
  v_.resize(T * KV);
  cpu::linear(pool_, normed_.data(), T, w.q, w.q_bias.data(), q_.data());
  cpu::linear(pool_, normed_.data(), T, w.k, w.k_bias.data(), k_.data());
  cpu::linear(pool_, normed_.data(), T, w.v, w.v_bias.data(), v_.data());
  const float concentration = static_cast<float>(c.rope_concentration());
  cpu::apply_rope(q_.data(), T, heads_, D, step_tokens.positions.data(), inv_freq_, concentration);
  cpu::apply_rope(k_.data(), T, kv_heads_, D, step_tokens.positions.data(), inv_freq_, concentration);

  for (int64_t t = 0; t < T; ++t) {
    const SequenceStep& step = batch.sequences[tokens[t].sequence];
    std::copy_n(k_.data() + t * KV, KV, kv_slot(layer, step.block_tables, tokens[t].slot, 0));
    std::copy_n(v_.data() + t * KV, KV, kv_slot(layer, step.block_tables, tokens[t].slot, 1));
  }

  // Keys of a query at position p: the window's last `sliding_window` positions, or all of [0, p]; in a tree step
  // only the ancestors among the step's tokens (key_slots).
  const bool sliding = c.layer_types[layer] == AttentionKind::sliding;
  const float scale = c.attention_scale();
  attn_.resize(T * Q);
  const int per_kv = c.heads_per_kv();
  pool_.parallel_for(T * kv_heads_, 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<const float*> key_rows, value_rows;
    thread_local std::vector<int32_t> slots;
    for (size_t item = begin; item < end; ++item) {
      const int64_t t = static_cast<int64_t>(item) / kv_heads_;
      const int kv_head = static_cast<int>(item % kv_heads_);
      const SequenceStep& step = batch.sequences[tokens[t].sequence];
      const int32_t lo = sliding ? std::max(0, tokens[t].position - c.sliding_window + 1) : 0;
      cpu::key_slots(step, tokens[t], lo, slots);
      const int64_t n = static_cast<int64_t>(slots.size());
      key_rows.resize(n);
      value_rows.resize(n);
      scores.resize(n);
      for (int64_t j = 0; j < n; ++j) {
        key_rows[j] = kv_slot(layer, step.block_tables, slots[j], 0) + kv_head * D;
        value_rows[j] = kv_slot(layer, step.block_tables, slots[j], 1) + kv_head * D;
      }
      for (int m = 0; m < per_kv; ++m) {
        const int head = kv_head * per_kv + m;
        cpu::attend_one_head(
            q_.data() + (t * heads_ + head) * D, D, n, [&](int64_t j) { return key_rows[j]; },
            [&](int64_t j) { return value_rows[j]; }, w.sinks[head], scale, scores.data(),
            attn_.data() + (t * heads_ + head) * D);
      }
    }
  });
  proj_.resize(T * H);
  cpu::linear(pool_, attn_.data(), T, w.o, w.o_bias.data(), proj_.data());
  if (communicator_ != nullptr) communicator_->all_reduce_sum(proj_);
  for (int64_t i = 0; i < T * H; ++i) x_[i] += proj_[i];
}

void CpuRunner::moe_layer(int layer, int64_t T) {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_->layers[layer];
  const int64_t H = c.hidden_size, I = w.mlp2.in_features;  // this rank's share of the intermediate dimension
  const int E = c.num_experts, K = c.experts_per_token;

  normed_.resize(T * H);
  cpu::rms_norm(x_.data(), w.mlp_norm.data(), T, H, c.rms_norm_eps, normed_.data());
  std::vector<float> router_logits(T * E);
  cpu::linear(pool_, normed_.data(), T, w.router, w.router_bias.data(), router_logits.data());
  std::vector<int32_t> chosen(T * K);
  std::vector<float> weights(T * K);
  cpu::route_top_k(router_logits.data(), T, E, K, chosen.data(), weights.data());

  // Group (token, slot) pairs by expert, run each of this rank's experts once over its tokens, and combine in slot
  // order.
  std::vector<std::vector<int64_t>> assigned(E);
  for (int64_t i = 0; i < T * K; ++i) assigned[chosen[i]].push_back(i);
  std::vector<float> expert_out(T * K * H);
  std::vector<float> gathered, hidden, activated, out;
  for (int e = static_cast<int>(shard_.experts.begin); e < shard_.experts.end; ++e) {
    const auto& slots = assigned[e];
    const int64_t n = static_cast<int64_t>(slots.size());
    if (n == 0) continue;
    gathered.resize(n * H);
    for (int64_t j = 0; j < n; ++j) std::copy_n(normed_.data() + (slots[j] / K) * H, H, gathered.data() + j * H);
    hidden.resize(n * 2 * I);
    cpu::expert_linear(pool_, gathered.data(), n, w.mlp1, e, hidden.data());
    activated.resize(n * I);
    cpu::swiglu(hidden.data(), n, I, c.swiglu_alpha, c.swiglu_limit, activated.data(), &swiglu_counters_);
    out.resize(n * H);
    cpu::expert_linear(pool_, activated.data(), n, w.mlp2, e, out.data());
    for (int64_t j = 0; j < n; ++j) std::copy_n(out.data() + j * H, H, expert_out.data() + slots[j] * H);
  }
  // Weighted sum of the experts' outputs first (over the ranks too), then the residual add, as the reference does.
  moe_out_.assign(T * H, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    float* combined = moe_out_.data() + t * H;
    for (int j = 0; j < K; ++j) {
      if (!shard_.experts.contains(chosen[t * K + j])) continue;
      const float weight = weights[t * K + j];
      const float* y = expert_out.data() + (t * K + j) * H;
      for (int64_t i = 0; i < H; ++i) combined[i] += weight * y[i];
    }
  }
  if (communicator_ != nullptr) communicator_->all_reduce_sum(moe_out_);
  for (int64_t i = 0; i < T * H; ++i) x_[i] += moe_out_[i];
}

}  // namespace moeserve
