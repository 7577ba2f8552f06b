#include "runner/cpu/cpu_runner.h"

#include <algorithm>
#include <cmath>

#include "engine/logits_processing.h"
#include "engine/sampler.h"
#include "util/bfloat16.h"
#include "util/error.h"

namespace moeserve {

CpuRunner::CpuRunner(std::shared_ptr<const Checkpoint> checkpoint, size_t threads)
    : checkpoint_(std::move(checkpoint)),
      pool_(threads),
      groups_(kv_groups_of(checkpoint_->config())),
      inv_freq_(rope_inverse_frequencies(checkpoint_->config())) {
  max_layers_per_group_ = *std::max_element(groups_.layers_in_group.begin(), groups_.layers_in_group.end());
}

size_t CpuRunner::kv_block_bytes(int block_size) const {
  return static_cast<size_t>(max_layers_per_group_) * 2 * block_size * config().kv_dim() * sizeof(float);
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
  const int64_t kv_dim = config().kv_dim();
  const int64_t offset =
      (((static_cast<int64_t>(block) * max_layers_per_group_ + groups_.slot_of_layer[layer]) * 2 + kv) *
           layout_.block_size +
       slot % layout_.block_size) *
      kv_dim;
  return kv_cache_.data() + offset;
}

void CpuRunner::move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) {
  MOESERVE_CHECK(static_cast<int>(block_tables.size()) == groups_.num_groups(), "{} block tables for {} KV groups",
                 block_tables.size(), groups_.num_groups());
  const int64_t kv_dim = config().kv_dim();
  for (const KvSlotMove& move : moves)
    for (int layer = 0; layer < config().num_layers; ++layer)
      for (int kv = 0; kv < 2; ++kv)
        std::copy_n(kv_slot(layer, block_tables, move.from, kv), kv_dim, kv_slot(layer, block_tables, move.to, kv));
}

void CpuRunner::key_slots(const SequenceStep& step, const TokenInfo& token, bool sliding,
                          std::vector<int32_t>& slots) const {
  const ModelConfig& c = config();
  const int32_t lo = sliding ? std::max(0, token.position - c.sliding_window + 1) : 0;
  slots.clear();
  for (int32_t p = lo; p < step.start_position; ++p) slots.push_back(p);
  if (step.tree_parent.empty()) {
    for (int32_t p = std::max(lo, step.start_position); p <= token.position; ++p) slots.push_back(p);
    return;
  }
  // Ancestors from the token up, kept while inside the window (positions only fall going up), then reversed.
  const size_t prefix = slots.size();
  int32_t position = token.position;
  for (int32_t i = token.index; i >= 0 && position >= lo; i = step.tree_parent[i], --position)
    slots.push_back(step.start_position + i);
  std::reverse(slots.begin() + static_cast<std::ptrdiff_t>(prefix), slots.end());
}

void CpuRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  const ModelConfig& c = config();
  const ModelWeights& w = checkpoint_->weights();
  MOESERVE_CHECK(!kv_cache_.empty(), "forward() before allocate_kv_cache()");
  const int64_t H = c.hidden_size;

  std::vector<TokenInfo> tokens;
  std::vector<int32_t> ids;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceStep& step = batch.sequences[s];
    MOESERVE_CHECK(static_cast<int>(step.block_tables.size()) == groups_.num_groups(),
                   "sequence {}: {} block tables for {} KV groups", s, step.block_tables.size(), groups_.num_groups());
    MOESERVE_CHECK(step.num_logits >= 0 && step.num_logits <= static_cast<int32_t>(step.tokens.size()),
                   "sequence {}: num_logits {} for {} tokens", s, step.num_logits, step.tokens.size());
    MOESERVE_CHECK(step.start_position >= 0 &&
                       step.start_position + static_cast<int64_t>(step.tokens.size()) <= c.max_position_embeddings,
                   "sequence {}: positions {}..{} exceed the model's context of {}", s, step.start_position,
                   step.start_position + step.tokens.size(), c.max_position_embeddings);
    const bool tree = !step.tree_parent.empty();
    MOESERVE_CHECK(!tree || step.tree_parent.size() == step.tokens.size(), "sequence {}: {} tree parents for {} tokens",
                   s, step.tree_parent.size(), step.tokens.size());
    const size_t first = tokens.size();
    for (size_t i = 0; i < step.tokens.size(); ++i) {
      MOESERVE_CHECK(step.tokens[i] >= 0 && step.tokens[i] < c.vocab_size, "sequence {}: token id {} is outside the vocabulary of {}",
                     s, step.tokens[i], c.vocab_size);
      const int32_t index = static_cast<int32_t>(i);
      int32_t depth = index;
      if (tree) {
        const int32_t parent = step.tree_parent[i];
        MOESERVE_CHECK(parent >= -1 && parent < index, "sequence {}: token {} has tree parent {} (must be -1 or earlier)",
                       s, i, parent);
        depth = parent < 0 ? 0 : tokens[first + parent].position - step.start_position + 1;
      }
      tokens.push_back({static_cast<int32_t>(s), index, step.start_position + depth, step.start_position + index});
      ids.push_back(step.tokens[i]);
    }
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  positions_.resize(T);
  for (int64_t t = 0; t < T; ++t) positions_[t] = tokens[t].position;

  x_.resize(T * H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x_[t * H + i] = w.embedding.at(ids[t], i);

  output.captured.assign(batch.capture_layers.size(), {});
  for (int layer = 0; layer < c.num_layers; ++layer) {
    attention_layer(layer, batch, tokens);
    moe_layer(layer, T);
    for (size_t j = 0; j < batch.capture_layers.size(); ++j)
      if (batch.capture_layers[j] == layer) output.captured[j].assign(x_.begin(), x_.end());
  }

  // Logits rows: the last num_logits tokens of each sequence.
  std::vector<int64_t> rows;
  std::vector<const SequenceStep*> row_step;
  std::vector<int32_t> row_in_step;
  int64_t first = 0;
  for (const SequenceStep& step : batch.sequences) {
    const int64_t n = static_cast<int64_t>(step.tokens.size());
    MOESERVE_CHECK(step.logprob_tokens.empty() || static_cast<int64_t>(step.logprob_tokens.size()) == step.num_logits,
                   "{} logprob tokens for {} logits rows", step.logprob_tokens.size(), step.num_logits);
    for (int64_t j = n - step.num_logits; j < n; ++j) {
      rows.push_back(first + j);
      row_step.push_back(&step);
      row_in_step.push_back(static_cast<int32_t>(j - (n - step.num_logits)));
    }
    first += n;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  normed_.resize(R * H);
  for (int64_t r = 0; r < R; ++r)
    cpu::rms_norm(x_.data() + rows[r] * H, w.final_norm.data(), 1, H, c.rms_norm_eps, normed_.data() + r * H);
  output.rows = R;
  output.logits.resize(R * c.vocab_size);
  cpu::linear(pool_, normed_.data(), R, w.unembedding, nullptr, output.logits.data());
  output.sampled.assign(R, -1);
  output.logprobs.clear();
  std::vector<float> raw_row;
  for (int64_t r = 0; r < R; ++r) {
    const SequenceStep& step = *row_step[r];
    const std::span<float> row(output.logits.data() + r * c.vocab_size, static_cast<size_t>(c.vocab_size));
    const bool wants_logprobs = step.top_logprobs >= 0;
    if (wants_logprobs) output.logprobs.resize(R);
    const int32_t k = row_in_step[r];
    if (!step.logprob_tokens.empty() && step.logprob_tokens[k] >= 0) {  // scored, not sampled
      if (wants_logprobs) output.logprobs[r] = token_logprobs(row, step.logprob_tokens[k], step.top_logprobs);
      continue;
    }
    if (!row_samples(step, k)) continue;
    // Raw logprobs are of the logits before any edit: the row is kept aside when edits change it.
    const bool edited = !step.logit_edits.empty() || !step.allowed_tokens.empty();
    if (edited && wants_logprobs) raw_row.assign(row.begin(), row.end());
    if (edited) apply_logit_edits(row, step.logit_edits, step.allowed_tokens);
    output.sampled[r] = sample_token(row, *step.sampling, row_sample_index(step, k));
    if (wants_logprobs)
      output.logprobs[r] =
          token_logprobs(edited ? std::span<const float>(raw_row) : row, output.sampled[r], step.top_logprobs);
  }
  if (!batch.return_logits) output.logits.clear();
}

void CpuRunner::attention_layer(int layer, const ForwardBatch& batch, const std::vector<TokenInfo>& tokens) {
  const ModelConfig& c = config();
  const LayerWeights& w = checkpoint_->weights().layers[layer];
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim();
  const int D = c.head_dim;

  normed_.resize(T * H);
  cpu::rms_norm(x_.data(), w.attn_norm.data(), T, H, c.rms_norm_eps, normed_.data());
  q_.resize(T * Q);
  k_.resize(T * KV);
  v_.resize(T * KV);
  cpu::linear(pool_, normed_.data(), T, w.q, w.q_bias.data(), q_.data());
  cpu::linear(pool_, normed_.data(), T, w.k, w.k_bias.data(), k_.data());
  cpu::linear(pool_, normed_.data(), T, w.v, w.v_bias.data(), v_.data());
  const float concentration = static_cast<float>(c.rope_concentration());
  cpu::apply_rope(q_.data(), T, c.num_heads, D, positions_.data(), inv_freq_, concentration);
  cpu::apply_rope(k_.data(), T, c.num_kv_heads, D, positions_.data(), inv_freq_, concentration);

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
  pool_.parallel_for(T * c.num_kv_heads, 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<const float*> key_rows, value_rows;
    thread_local std::vector<int32_t> slots;
    for (size_t item = begin; item < end; ++item) {
      const int64_t t = static_cast<int64_t>(item) / c.num_kv_heads;
      const int kv_head = static_cast<int>(item % c.num_kv_heads);
      const SequenceStep& step = batch.sequences[tokens[t].sequence];
      key_slots(step, tokens[t], sliding, slots);
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
            q_.data() + (t * c.num_heads + head) * D, D, n, [&](int64_t j) { return key_rows[j]; },
            [&](int64_t j) { return value_rows[j]; }, w.sinks[head], scale, scores.data(),
            attn_.data() + (t * c.num_heads + head) * D);
      }
    }
  });
  proj_.resize(T * H);
  cpu::linear(pool_, attn_.data(), T, w.o, w.o_bias.data(), proj_.data());
  for (int64_t i = 0; i < T * H; ++i) x_[i] += proj_[i];
}

void CpuRunner::moe_layer(int layer, int64_t T) {
  const ModelConfig& c = config();
  const LayerWeights& w = checkpoint_->weights().layers[layer];
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int E = c.num_experts, K = c.experts_per_token;

  normed_.resize(T * H);
  cpu::rms_norm(x_.data(), w.mlp_norm.data(), T, H, c.rms_norm_eps, normed_.data());
  std::vector<float> router_logits(T * E);
  cpu::linear(pool_, normed_.data(), T, w.router, w.router_bias.data(), router_logits.data());
  std::vector<int32_t> chosen(T * K);
  std::vector<float> weights(T * K);
  cpu::route_top_k(router_logits.data(), T, E, K, chosen.data(), weights.data());

  // Group (token, slot) pairs by expert, run each expert once over its tokens, and combine in slot order.
  std::vector<std::vector<int64_t>> assigned(E);
  for (int64_t i = 0; i < T * K; ++i) assigned[chosen[i]].push_back(i);
  std::vector<float> expert_out(T * K * H);
  std::vector<float> gathered, hidden, activated, out;
  for (int e = 0; e < E; ++e) {
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
  // Weighted sum of the experts' outputs first, then the residual add, as the reference does.
  std::vector<float> combined(H);
  for (int64_t t = 0; t < T; ++t) {
    std::fill(combined.begin(), combined.end(), 0.0f);
    for (int j = 0; j < K; ++j) {
      const float weight = weights[t * K + j];
      const float* y = expert_out.data() + (t * K + j) * H;
      for (int64_t i = 0; i < H; ++i) combined[i] += weight * y[i];
    }
    for (int64_t i = 0; i < H; ++i) x_[t * H + i] += combined[i];
  }
}

}  // namespace moeserve
