#include "runner/cpu/eagle3_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runner/cpu/ops.h"
#include "runner/eagle3_tree.h"
#include "util/error.h"

namespace moeserve::speculative {

Eagle3Target Eagle3Target::of(std::shared_ptr<const Checkpoint> checkpoint) {
  Eagle3Target target;
  target.num_layers = checkpoint->config().num_layers;
  target.hidden_size = checkpoint->config().hidden_size;
  target.vocab_size = checkpoint->config().vocab_size;
  target.embedding = checkpoint->weights().embedding;
  target.unembedding = checkpoint->weights().unembedding;
  target.owner = std::move(checkpoint);
  return target;
}

size_t Eagle3Drafter::kv_block_bytes(const Eagle3Config& config, int block_size) {
  return static_cast<size_t>(block_size) * 2 * config.kv_dim() * sizeof(float);
}

Eagle3Drafter::Eagle3Drafter(std::shared_ptr<const Eagle3Checkpoint> draft, Eagle3Target target,
                             Eagle3DrafterOptions options)
    : TreeDrafter("EAGLE-3 drafter", options.block_size, options.num_blocks, 2 * draft->config().kv_dim()),
      draft_(std::move(draft)),
      target_(std::move(target)),
      inv_freq_(llama_rope_inverse_frequencies(draft_->config().rope, draft_->config().head_dim)),
      pool_threads_(options.threads) {
  const Eagle3Config& c = draft_->config();
  const Eagle3Weights& w = draft_->weights();
  // The checkpoint was validated against a target config; these are the matrices actually handed over.
  MOESERVE_CHECK(c.vocab_size == target_.vocab_size && c.target_hidden_size == target_.hidden_size,
                 "EAGLE-3 drafter {}: made for vocabulary {} and hidden size {}, the target has {} and {}",
                 draft_->directory(), c.vocab_size, c.target_hidden_size, target_.vocab_size, target_.hidden_size);
  for (int layer : c.aux_layer_ids)
    MOESERVE_CHECK(layer < target_.num_layers, "EAGLE-3 drafter {}: aux layer {} but the target has {} layers",
                   draft_->directory(), layer, target_.num_layers);
  embedding_ = w.embed_tokens ? *w.embed_tokens : target_.embedding;
  lm_head_ = w.lm_head ? *w.lm_head : target_.unembedding;
  MOESERVE_CHECK(embedding_.rows == c.vocab_size && embedding_.cols == c.hidden_size &&
                     lm_head_.rows == c.draft_vocab_size && lm_head_.cols == c.hidden_size,
                 "EAGLE-3 drafter {}: embedding [{}, {}] / lm_head [{}, {}] do not fit hidden size {}",
                 draft_->directory(), embedding_.rows, embedding_.cols, lm_head_.rows, lm_head_.cols, c.hidden_size);
}

// K (which = 0) or V (which = 1) of one position.
float* Eagle3Drafter::kv_slot(const SequenceKv& kv, int32_t slot, int which) {
  return TreeDrafter::kv_slot(kv, slot) + which * draft_->config().kv_dim();
}

int32_t Eagle3Drafter::to_target(int32_t draft_id) const {
  const auto& d2t = draft_->weights().d2t;
  return d2t.empty() ? draft_id : static_cast<int32_t>(draft_id + d2t[draft_id]);
}

void Eagle3Drafter::fuse_features(const float* features, int64_t n, float* g) {
  const Eagle3Config& c = draft_->config();
  const Eagle3Weights& w = draft_->weights();
  if (!c.norm_before_fc) {
    cpu::linear(pool_threads_, features, n, w.fc, nullptr, g);
    return;
  }
  std::vector<float> normed(n * c.feature_width());
  cpu::rms_norm(features, w.input_norm.data(), n, c.feature_width(), c.rms_norm_eps, normed.data());
  cpu::linear(pool_threads_, normed.data(), n, w.fc, nullptr, g);
}

void Eagle3Drafter::forward_rows(const std::vector<Row>& rows, const float* g, float* h2) {
  const Eagle3Config& c = draft_->config();
  const Eagle3Weights& w = draft_->weights();
  const int64_t R = static_cast<int64_t>(rows.size()), H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(),
                I = c.intermediate_size;
  const int D = c.head_dim;

  // attn_in = concat(input_layernorm(embedding), hidden_norm(g)): the embedding first.
  std::vector<float> embedded(R * H), attn_in(R * 2 * H), normed(R * H);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < H; ++i) embedded[r * H + i] = embedding_.at(rows[r].token, i);
  std::vector<int32_t> positions(R);
  for (int64_t r = 0; r < R; ++r) positions[r] = rows[r].position;
  cpu::rms_norm(embedded.data(), w.input_layernorm.data(), R, H, c.rms_norm_eps, normed.data());
  for (int64_t r = 0; r < R; ++r) std::copy_n(normed.data() + r * H, H, attn_in.data() + r * 2 * H);
  cpu::rms_norm(g, w.hidden_norm.data(), R, H, c.rms_norm_eps, normed.data());
  for (int64_t r = 0; r < R; ++r) std::copy_n(normed.data() + r * H, H, attn_in.data() + r * 2 * H + H);
  // The residual is the fused feature, or its normed form in the "speculators" format.
  std::vector<float> h1(c.norm_before_residual ? normed : std::vector<float>(g, g + R * H));

  std::vector<float> q(R * Q), k(R * KV), v(R * KV);
  cpu::linear(pool_threads_, attn_in.data(), R, w.q, nullptr, q.data());
  cpu::linear(pool_threads_, attn_in.data(), R, w.k, nullptr, k.data());
  cpu::linear(pool_threads_, attn_in.data(), R, w.v, nullptr, v.data());
  cpu::apply_rope(q.data(), R, c.num_heads, D, positions.data(), inv_freq_, 1.0f);
  cpu::apply_rope(k.data(), R, c.num_kv_heads, D, positions.data(), inv_freq_, 1.0f);
  for (int64_t r = 0; r < R; ++r) {
    std::copy_n(k.data() + r * KV, KV, kv_slot(*rows[r].kv, rows[r].slot, 0));
    std::copy_n(v.data() + r * KV, KV, kv_slot(*rows[r].kv, rows[r].slot, 1));
  }

  // Plain softmax attention: the CPU runner's kernel with no sink (e^-inf adds nothing to the denominator).
  const float no_sink = -std::numeric_limits<float>::infinity();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int per_kv = c.heads_per_kv();
  std::vector<float> attn(R * Q);
  pool_threads_.parallel_for(R * c.num_kv_heads, 1, [&](size_t begin, size_t end) {
    std::vector<float> scores;
    std::vector<const float*> key_rows, value_rows;
    for (size_t item = begin; item < end; ++item) {
      const Row& row = rows[item / c.num_kv_heads];
      const int kv_head = static_cast<int>(item % c.num_kv_heads);
      const int64_t n = row.prefix + static_cast<int64_t>(row.extra.size());
      key_rows.resize(n);
      value_rows.resize(n);
      scores.resize(n);
      for (int64_t j = 0; j < n; ++j) {
        const int32_t slot = j < row.prefix ? static_cast<int32_t>(j) : row.extra[j - row.prefix];
        key_rows[j] = kv_slot(*row.kv, slot, 0) + kv_head * D;
        value_rows[j] = kv_slot(*row.kv, slot, 1) + kv_head * D;
      }
      const int64_t r = static_cast<int64_t>(item / c.num_kv_heads);
      for (int m = 0; m < per_kv; ++m) {
        const int head = kv_head * per_kv + m;
        cpu::attend_one_head(
            q.data() + (r * c.num_heads + head) * D, D, n, [&](int64_t j) { return key_rows[j]; },
            [&](int64_t j) { return value_rows[j]; }, no_sink, scale, scores.data(),
            attn.data() + (r * c.num_heads + head) * D);
      }
    }
  });
  std::vector<float> projected(R * H);
  cpu::linear(pool_threads_, attn.data(), R, w.o, nullptr, projected.data());
  for (int64_t i = 0; i < R * H; ++i) h1[i] += projected[i];

  // SiLU-gated MLP: h2 = h1 + down(silu(gate(x)) * up(x)), x = post_attention_layernorm(h1).
  cpu::rms_norm(h1.data(), w.post_attention_layernorm.data(), R, H, c.rms_norm_eps, normed.data());
  std::vector<float> gate(R * I), up(R * I);
  cpu::linear(pool_threads_, normed.data(), R, w.gate, nullptr, gate.data());
  cpu::linear(pool_threads_, normed.data(), R, w.up, nullptr, up.data());
  for (int64_t i = 0; i < R * I; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  cpu::linear(pool_threads_, gate.data(), R, w.down, nullptr, h2);
  for (int64_t i = 0; i < R * H; ++i) h2[i] += h1[i];
}

void Eagle3Drafter::draft_log_probs(const float* h2, int64_t R, std::vector<float>& out) {
  const Eagle3Config& c = draft_->config();
  std::vector<float> normed(R * c.hidden_size);
  cpu::rms_norm(h2, draft_->weights().final_norm.data(), R, c.hidden_size, c.rms_norm_eps, normed.data());
  out.resize(R * c.draft_vocab_size);
  cpu::linear(pool_threads_, normed.data(), R, lm_head_, nullptr, out.data());
  const size_t V = c.draft_vocab_size;
  for (int64_t r = 0; r < R; ++r) log_softmax({out.data() + r * V, V});
}

}  // namespace moeserve::speculative
