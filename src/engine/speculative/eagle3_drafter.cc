#include "engine/speculative/eagle3_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "engine/speculative/eagle3_tree.h"
#include "runner/cpu/ops.h"
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
    : draft_(std::move(draft)),
      target_(std::move(target)),
      inv_freq_(llama_rope_inverse_frequencies(draft_->config().rope, draft_->config().head_dim)),
      pool_threads_(options.threads),
      kv_tables_(options.num_blocks, options.block_size, "EAGLE-3 drafter",
                 [this](int32_t from, int32_t to, int32_t slots) {
                   const size_t block = kv_block_bytes(draft_->config(), kv_tables_.block_size()) / sizeof(float);
                   std::copy_n(kv_cache_.data() + from * block, slots * block / kv_tables_.block_size(),
                               kv_cache_.data() + to * block);
                 }) {
  const Eagle3Config& c = draft_->config();
  const Eagle3Weights& w = draft_->weights();
  MOESERVE_CHECK(options.block_size > 0 && options.num_blocks > 0,
                 "EAGLE-3 drafter: KV pool needs a positive block size and count (got {} x {})", options.num_blocks,
                 options.block_size);
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
  kv_cache_.assign(kv_block_bytes(c, options.block_size) / sizeof(float) * options.num_blocks, 0.0f);
}

int32_t Eagle3Drafter::cached_positions(uint64_t sequence_id) const {
  return kv_tables_.cached_positions(sequence_id);
}

void Eagle3Drafter::release(uint64_t sequence_id) { kv_tables_.release(sequence_id); }

float* Eagle3Drafter::kv_slot(const SequenceKv& kv, int32_t slot, int which) {
  const int64_t kv_dim = draft_->config().kv_dim();
  const int64_t block = kv.blocks[slot / kv_tables_.block_size()];
  return kv_cache_.data() + ((block * kv_tables_.block_size() + slot % kv_tables_.block_size()) * 2 + which) * kv_dim;
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

// One sequence being drafted in this call: its tree search and the expanded nodes' outputs and KV slots.
struct Eagle3Drafter::Drafting {
  size_t input = 0;
  SequenceKv* kv = nullptr;
  int32_t root_position = 0;         // the position of the root token (the newest verified one)
  std::vector<float> root_h2;        // prenorm output of the last verified row, [H]
  std::vector<float> node_h2;        // prenorm output of each expanded node, [expanded, H]
  std::vector<int32_t> node_slot;    // KV slot of each node (-1 until expanded)
  std::vector<int64_t> node_h2_row;  // row of node_h2 (-1 until expanded)
  int32_t scratch_slots = 0;         // KV slots past the committed length taken by expanded nodes
  std::unique_ptr<DraftTreeSearch> search;
};

std::vector<float> Eagle3Drafter::extend(std::span<const DraftInput> inputs, std::vector<int64_t>& last_row) {
  const Eagle3Config& c = draft_->config();
  const int64_t H = c.hidden_size, F = c.feature_width();
  std::vector<Row> rows;
  std::vector<float> features;
  last_row.assign(inputs.size(), -1);
  std::unordered_set<uint64_t> seen;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const DraftInput& in = inputs[s];
    const int64_t n = static_cast<int64_t>(in.next_tokens.size());
    MOESERVE_CHECK(seen.insert(in.sequence_id).second, "EAGLE-3 drafter: sequence {} twice in one call",
                   in.sequence_id);
    SequenceKv& kv = kv_tables_.begin(in, F, c.vocab_size);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t token = in.next_tokens[i];
      const int32_t p = in.start_position + static_cast<int32_t>(i);
      rows.push_back({&kv, token, p, p, p, {p}});
    }
    features.insert(features.end(), in.features.begin(), in.features.end());
    if (n > 0) last_row[s] = static_cast<int64_t>(rows.size()) - 1;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> g(R * H), h2(R * H);
  if (R > 0) {
    fuse_features(features.data(), R, g.data());
    forward_rows(rows, g.data(), h2.data());
  }
  for (const DraftInput& in : inputs)
    kv_tables_.commit(kv_tables_.sequence(in.sequence_id), in.start_position, in.start_token, in.next_tokens);
  return h2;
}

bool Eagle3Drafter::expand_frontiers(std::vector<Drafting>& drafting, std::span<const DraftInput> inputs) {
  const int64_t H = draft_->config().hidden_size;
  const size_t V = draft_->config().draft_vocab_size;
  std::vector<Row> rows;
  std::vector<float> g;
  std::vector<std::pair<Drafting*, int>> owner;  // (sequence, node) of each row
  for (Drafting& state : drafting) {
    const auto& nodes = state.search->nodes();
    state.node_slot.resize(nodes.size(), -1);
    state.node_h2_row.resize(nodes.size(), -1);
    for (int node : state.search->frontier()) {
      const int32_t slot = state.kv->length + state.scratch_slots++;
      Row row{state.kv, to_target(nodes[node].draft_id), state.root_position + nodes[node].depth - 1, slot,
              state.kv->length, {}};
      for (int a = nodes[node].parent; a >= 0; a = nodes[a].parent) row.extra.push_back(state.node_slot[a]);
      std::reverse(row.extra.begin(), row.extra.end());
      row.extra.push_back(slot);
      kv_tables_.reserve_slots(*state.kv, slot + 1, inputs[state.input].sequence_id);
      const int parent = nodes[node].parent;
      const float* parent_h2 =
          parent < 0 ? state.root_h2.data() : state.node_h2.data() + state.node_h2_row[parent] * H;
      g.insert(g.end(), parent_h2, parent_h2 + H);
      rows.push_back(std::move(row));
      owner.push_back({&state, node});
    }
  }
  if (rows.empty()) return false;
  std::vector<float> h2(rows.size() * H), log_probs;
  forward_rows(rows, g.data(), h2.data());
  draft_log_probs(h2.data(), static_cast<int64_t>(rows.size()), log_probs);
  for (size_t i = 0; i < owner.size(); ++i) {
    auto [state, node] = owner[i];
    state->node_slot[node] = rows[i].slot;
    state->node_h2_row[node] = static_cast<int64_t>(state->node_h2.size() / H);
    state->node_h2.insert(state->node_h2.end(), h2.begin() + i * H, h2.begin() + (i + 1) * H);
  }
  for (size_t i = 0; i < owner.size();) {
    DraftTreeSearch& search = *owner[i].first->search;
    const size_t count = search.frontier().size();
    search.expand(std::span(log_probs).subspan(i * V, count * V));
    i += count;
  }
  return true;
}

void Eagle3Drafter::propose_scored(std::span<const DraftInput> inputs, std::vector<DraftTree>& out,
                                   std::vector<std::vector<float>>* scores) {
  const int64_t H = draft_->config().hidden_size;
  const size_t V = draft_->config().draft_vocab_size;
  out.assign(inputs.size(), {});
  if (scores != nullptr) scores->assign(inputs.size(), {});

  // Roll back, then extend every sequence over its newly verified positions in one batch.
  std::vector<int64_t> last_row;
  const std::vector<float> h2 = extend(inputs, last_row);

  // Depth 1 from each drafting sequence's last verified row.
  std::vector<Drafting> drafting;
  std::vector<float> root_h2;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const DraftInput& in = inputs[s];
    if (in.shape.num_draft_tokens == 0) continue;
    Drafting state;
    state.input = s;
    state.kv = &kv_tables_.sequence(in.sequence_id);
    state.root_position = in.start_position + static_cast<int32_t>(in.next_tokens.size());
    state.root_h2.assign(h2.begin() + last_row[s] * H, h2.begin() + (last_row[s] + 1) * H);
    root_h2.insert(root_h2.end(), state.root_h2.begin(), state.root_h2.end());
    drafting.push_back(std::move(state));
  }
  std::vector<float> log_probs;
  draft_log_probs(root_h2.data(), static_cast<int64_t>(drafting.size()), log_probs);
  for (size_t d = 0; d < drafting.size(); ++d)
    drafting[d].search = std::make_unique<DraftTreeSearch>(inputs[drafting[d].input].shape,
                                                           std::span(log_probs).subspan(d * V, V));

  // Each further depth: every sequence's frontier nodes run as one batch. A node at depth t sits at position
  // root + t, is fed at position root + t - 1 (EAGLE's alignment) with its parent's prenorm output, and attends
  // to the committed positions and its ancestors, whose KV lives in scratch slots past the committed length.
  while (expand_frontiers(drafting, inputs)) {
  }

  // Speculative KV does not survive the call.
  for (Drafting& state : drafting) {
    out[state.input] = state.search->result([&](int32_t id) { return to_target(id); },
                                            scores != nullptr ? &(*scores)[state.input] : nullptr);
    kv_tables_.truncate(*state.kv, state.kv->length);
  }
}

}  // namespace moeserve::speculative
