#include "runner/cpu/tree_drafter.h"

#include <algorithm>
#include <unordered_set>

#include "runner/eagle3_tree.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

int64_t checked_pool(const std::string& owner, int64_t num_blocks, int block_size) {
  MOESERVE_CHECK(block_size > 0 && num_blocks > 0, "{}: KV pool needs a positive block size and count (got {} x {})",
                 owner, num_blocks, block_size);
  return num_blocks;
}

}  // namespace

TreeDrafter::TreeDrafter(std::string owner, int block_size, int64_t num_blocks, int64_t slot_floats)
    : owner_(std::move(owner)),
      slot_floats_(slot_floats),
      kv_tables_(checked_pool(owner_, num_blocks, block_size), block_size, owner_,
                 [this](int32_t from, int32_t to, int32_t slots) {
                   const int64_t block = static_cast<int64_t>(kv_tables_.block_size()) * slot_floats_;
                   std::copy_n(kv_cache_.data() + from * block, slots * slot_floats_, kv_cache_.data() + to * block);
                 }),
      kv_cache_(static_cast<size_t>(num_blocks) * block_size * slot_floats_, 0.0f) {}

float* TreeDrafter::kv_slot(const SequenceKv& kv, int32_t slot) {
  const int64_t block = kv.blocks[slot / kv_tables_.block_size()];
  return kv_cache_.data() + (block * kv_tables_.block_size() + slot % kv_tables_.block_size()) * slot_floats_;
}

// One sequence being drafted in this call: its tree search and the expanded nodes' states and KV slots.
struct TreeDrafter::Drafting {
  size_t input = 0;
  SequenceKv* kv = nullptr;
  int32_t root_position = 0;            // the position of the root token (the newest verified one)
  std::vector<float> root_state;        // state of the last verified row, [state]
  std::vector<float> node_state;        // state of each expanded node, [expanded, state]
  std::vector<int32_t> node_slot;       // KV slot of each node (-1 until expanded)
  std::vector<int64_t> node_state_row;  // row of node_state (-1 until expanded)
  int32_t scratch_slots = 0;            // KV slots past the committed length taken by expanded nodes
  std::unique_ptr<DraftTreeSearch> search;
};

std::vector<float> TreeDrafter::extend(std::span<const DraftInput> inputs, std::vector<int64_t>& last_row) {
  const int64_t S = state_width(), F = feature_width();
  std::vector<Row> rows;
  std::vector<float> features;
  last_row.assign(inputs.size(), -1);
  std::unordered_set<uint64_t> seen;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const DraftInput& in = inputs[s];
    const int64_t n = static_cast<int64_t>(in.next_tokens.size());
    MOESERVE_CHECK(seen.insert(in.sequence_id).second, "{}: sequence {} twice in one call", owner_, in.sequence_id);
    SequenceKv& kv = kv_tables_.begin(in, F, target_vocab());
    for (int64_t i = 0; i < n; ++i) {
      const int32_t token = in.next_tokens[i];
      const int32_t p = in.start_position + static_cast<int32_t>(i);
      rows.push_back({&kv, token, p, p, p, {p}});
    }
    features.insert(features.end(), in.features.begin(), in.features.end());
    if (n > 0) last_row[s] = static_cast<int64_t>(rows.size()) - 1;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> g(R * S), h(R * S);
  if (R > 0) {
    fuse_features(features.data(), R, g.data());
    forward_rows(rows, g.data(), h.data());
  }
  for (const DraftInput& in : inputs)
    kv_tables_.commit(kv_tables_.sequence(in.sequence_id), in.start_position, in.start_token, in.next_tokens);
  return h;
}

bool TreeDrafter::expand_frontiers(std::vector<Drafting>& drafting, std::span<const DraftInput> inputs) {
  const int64_t S = state_width();
  const size_t V = draft_vocab();
  std::vector<Row> rows;
  std::vector<float> g;
  std::vector<std::pair<Drafting*, int>> owner;  // (sequence, node) of each row
  for (Drafting& state : drafting) {
    const auto& nodes = state.search->nodes();
    state.node_slot.resize(nodes.size(), -1);
    state.node_state_row.resize(nodes.size(), -1);
    for (int node : state.search->frontier()) {
      const int32_t slot = state.kv->length + state.scratch_slots++;
      Row row{state.kv, to_target(nodes[node].draft_id), state.root_position + nodes[node].depth - 1, slot,
              state.kv->length, {}};
      for (int a = nodes[node].parent; a >= 0; a = nodes[a].parent) row.extra.push_back(state.node_slot[a]);
      std::reverse(row.extra.begin(), row.extra.end());
      row.extra.push_back(slot);
      kv_tables_.reserve_slots(*state.kv, slot + 1, inputs[state.input].sequence_id);
      const int parent = nodes[node].parent;
      const float* parent_state =
          parent < 0 ? state.root_state.data() : state.node_state.data() + state.node_state_row[parent] * S;
      g.insert(g.end(), parent_state, parent_state + S);
      rows.push_back(std::move(row));
      owner.push_back({&state, node});
    }
  }
  if (rows.empty()) return false;
  std::vector<float> h(rows.size() * S), log_probs;
  forward_rows(rows, g.data(), h.data());
  draft_log_probs(h.data(), static_cast<int64_t>(rows.size()), log_probs);
  for (size_t i = 0; i < owner.size(); ++i) {
    auto [state, node] = owner[i];
    state->node_slot[node] = rows[i].slot;
    state->node_state_row[node] = static_cast<int64_t>(state->node_state.size() / S);
    state->node_state.insert(state->node_state.end(), h.begin() + i * S, h.begin() + (i + 1) * S);
  }
  for (size_t i = 0; i < owner.size();) {
    DraftTreeSearch& search = *owner[i].first->search;
    const size_t count = search.frontier().size();
    search.expand(std::span(log_probs).subspan(i * V, count * V));
    i += count;
  }
  return true;
}

void TreeDrafter::propose_scored(std::span<const DraftInput> inputs, std::vector<DraftTree>& out,
                                 std::vector<std::vector<float>>* scores) {
  const int64_t S = state_width();
  const size_t V = draft_vocab();
  out.assign(inputs.size(), {});
  if (scores != nullptr) scores->assign(inputs.size(), {});

  // Roll back, then extend every sequence over its newly verified positions in one batch.
  std::vector<int64_t> last_row;
  const std::vector<float> h = extend(inputs, last_row);

  // Depth 1 from each drafting sequence's last verified row.
  std::vector<Drafting> drafting;
  std::vector<float> root_states;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const DraftInput& in = inputs[s];
    if (in.shape.num_draft_tokens == 0) continue;
    Drafting state;
    state.input = s;
    state.kv = &kv_tables_.sequence(in.sequence_id);
    state.root_position = in.start_position + static_cast<int32_t>(in.next_tokens.size());
    state.root_state.assign(h.begin() + last_row[s] * S, h.begin() + (last_row[s] + 1) * S);
    root_states.insert(root_states.end(), state.root_state.begin(), state.root_state.end());
    drafting.push_back(std::move(state));
  }
  std::vector<float> log_probs;
  draft_log_probs(root_states.data(), static_cast<int64_t>(drafting.size()), log_probs);
  for (size_t d = 0; d < drafting.size(); ++d)
    drafting[d].search = std::make_unique<DraftTreeSearch>(inputs[drafting[d].input].shape,
                                                           std::span(log_probs).subspan(d * V, V));

  // Each further depth: every sequence's frontier nodes run as one batch, attending to the committed positions
  // and their ancestors, whose KV lives in scratch slots past the committed length.
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
