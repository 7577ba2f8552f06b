#include "engine/speculative/test_drafters.h"

#include <algorithm>

#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

// A deterministic uniform per (seed, sequence, position, purpose), from the sampler's generator.
double draw(uint64_t seed, uint64_t sequence_id, int64_t position, int purpose) {
  return sampling_uniform(seed ^ (sequence_id * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(purpose) << 56),
                          static_cast<uint64_t>(position));
}

// The draft tree's skeleton: `levels` levels of `top_k` siblings, each level hanging under the chosen node of
// the one before (chosen(level) picks it), cut to `most` nodes.
template <typename TokenAt, typename Chosen>
DraftTree layered_tree(const DraftShape& shape, TokenAt token_at, Chosen chosen) {
  DraftTree tree;
  const size_t most = shape.is_chain() ? shape.num_draft_tokens : shape.total_tokens;
  int32_t parent = -1;
  for (int level = 0; level < shape.num_draft_tokens && tree.size() < most; ++level) {
    const int32_t first = static_cast<int32_t>(tree.size());
    for (int sibling = 0; sibling < shape.top_k && tree.size() < most; ++sibling) {
      tree.tokens.push_back(token_at(level, sibling));
      tree.parent.push_back(parent);
    }
    parent = first + std::min(chosen(level), static_cast<int32_t>(tree.size()) - 1 - first);
  }
  return tree;
}

}  // namespace

void RandomDrafter::propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) {
  out.assign(inputs.size(), {});
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    const int64_t root = in.start_position + static_cast<int64_t>(in.next_tokens.size());
    out[i] = layered_tree(
        in.shape,
        [&](int level, int sibling) {
          const double u = draw(seed_, in.sequence_id, root * 64 + level, sibling);
          return static_cast<int32_t>(u * vocab_);
        },
        [](int) { return 0; });
  }
}

TargetCopyDrafter::TargetCopyDrafter(std::shared_ptr<ModelRunner> target, int64_t kv_blocks, int block_size,
                                     double acceptance_rate, uint64_t seed)
    : target_(std::move(target)),
      block_size_(block_size),
      acceptance_rate_(acceptance_rate),
      seed_(seed),
      num_groups_(kv_groups_of(target_->config()).num_groups()) {
  target_->allocate_kv_cache({block_size, kv_blocks});
  for (int64_t b = kv_blocks - 1; b >= 0; --b) free_blocks_.push_back(static_cast<int32_t>(b));
}

void TargetCopyDrafter::map_positions(State& state, int64_t end) {
  state.block_tables.resize(num_groups_);
  for (auto& table : state.block_tables)
    while (static_cast<int64_t>(table.size()) * block_size_ < end) {
      MOESERVE_CHECK(!free_blocks_.empty(), "test drafter: its KV pool is exhausted at {} tokens", end);
      table.push_back(free_blocks_.back());
      free_blocks_.pop_back();
    }
}

int32_t TargetCopyDrafter::greedy_next(State& state, const std::vector<int32_t>& extra) {
  std::vector<int32_t> run(state.tokens.begin() + state.computed, state.tokens.end());
  run.insert(run.end(), extra.begin(), extra.end());
  const int64_t end = static_cast<int64_t>(state.tokens.size() + extra.size());
  map_positions(state, end);
  ForwardBatch batch;
  SequenceStep step;
  step.tokens = run;
  step.start_position = state.computed;
  for (const auto& table : state.block_tables) step.block_tables.emplace_back(table);
  batch.sequences.push_back(step);
  target_->forward(batch, output_);
  state.computed = static_cast<int32_t>(state.tokens.size());  // drafted positions are speculative: recomputed
  return argmax(output_.logits);
}

DraftTree TargetCopyDrafter::draft(State& state, uint64_t sequence_id, const DraftShape& shape) {
  const int64_t root = static_cast<int64_t>(state.tokens.size()) - 1;
  const int32_t vocab = target_->config().vocab_size;
  // Per level: the target's greedy token (while the draft is still on the greedy path), whether the level holds
  // it, and at which sibling.
  std::vector<int32_t> truth, extra;
  std::vector<int32_t> holds_at;  // sibling index, or -1 when the level only has wrong tokens
  bool on_path = true;
  for (int level = 0; level < shape.num_draft_tokens; ++level) {
    const int32_t greedy = on_path ? greedy_next(state, extra) : 0;
    const bool holds = on_path && draw(seed_, sequence_id, root * 64 + level, 0) < acceptance_rate_;
    truth.push_back(greedy);
    holds_at.push_back(holds ? static_cast<int32_t>(draw(seed_, sequence_id, root * 64 + level, 1) * shape.top_k) : -1);
    on_path = holds;
    extra.push_back(greedy);
  }
  return layered_tree(
      shape,
      [&](int level, int sibling) {
        if (sibling == holds_at[level]) return truth[level];
        // Wrong tokens: never the greedy one, distinct among siblings.
        return static_cast<int32_t>((truth[level] + 1 + sibling) % vocab);
      },
      [&](int level) { return std::max(holds_at[level], 0); });
}

void TargetCopyDrafter::propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) {
  out.assign(inputs.size(), {});
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    State& state = states_[in.sequence_id];
    MOESERVE_CHECK(in.start_position <= static_cast<int32_t>(state.tokens.size()),
                   "test drafter: sequence {} skips from position {} to {}", in.sequence_id, state.tokens.size(),
                   in.start_position);
    state.tokens.resize(in.start_position);
    state.tokens.push_back(in.start_token);
    state.tokens.insert(state.tokens.end(), in.next_tokens.begin(), in.next_tokens.end());
    state.computed = std::min(state.computed, in.start_position);
    if (in.shape.num_draft_tokens > 0) out[i] = draft(state, in.sequence_id, in.shape);
  }
}

void TargetCopyDrafter::release(uint64_t sequence_id) {
  auto it = states_.find(sequence_id);
  if (it == states_.end()) return;
  for (const auto& table : it->second.block_tables) free_blocks_.insert(free_blocks_.end(), table.begin(), table.end());
  states_.erase(it);
}

}  // namespace moeserve::speculative
