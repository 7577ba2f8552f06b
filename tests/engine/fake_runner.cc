#include "engine/fake_runner.h"

#include <fmt/format.h>

namespace moeserve::testing {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

CheckingFakeRunner::CheckingFakeRunner(int vocab, int window) {
  config_.num_layers = 2;
  config_.hidden_size = 32;
  config_.num_heads = 1;
  config_.num_kv_heads = 1;
  config_.head_dim = 32;
  config_.num_experts = 1;
  config_.experts_per_token = 1;
  config_.intermediate_size = 32;
  config_.vocab_size = vocab;
  config_.sliding_window = window;
  config_.max_position_embeddings = 1 << 20;
  config_.layer_types = {AttentionKind::sliding, AttentionKind::full};
  groups_ = kv_groups_of(config_);
}

void CheckingFakeRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  layout_ = layout;
  slots_.assign(layout.num_blocks * layout.block_size, Slot{});
}

CheckingFakeRunner::Slot& CheckingFakeRunner::slot(int group, std::span<const int32_t> table, int32_t position) {
  const int64_t logical = position / layout_.block_size;
  if (logical >= static_cast<int64_t>(table.size()))
    throw std::logic_error(fmt::format("group {}: position {} beyond its block table ({} blocks)", group, position,
                                       table.size()));
  const int32_t block = table[logical];
  if (block < 0 || block >= layout_.num_blocks)
    throw std::logic_error(fmt::format("group {}: position {} maps to block {} (not in the pool)", group, position, block));
  return slots_[static_cast<int64_t>(block) * layout_.block_size + position % layout_.block_size];
}

void CheckingFakeRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  ++calls_;
  output.logits.clear();
  output.sampled.clear();
  output.rows = 0;
  const int full = 1, sliding = 0;
  for (const SequenceStep& step : batch.sequences) {
    if (step.block_tables.size() != 2) throw std::logic_error("expected two KV groups");
    // The prefix hash before this chunk comes from the last cached position (full group keeps everything).
    uint64_t hash = 0;
    if (step.start_position > 0) {
      const Slot& prev = slot(full, step.block_tables[full], step.start_position - 1);
      if (prev.position != step.start_position - 1 || prev.group != full)
        throw std::logic_error(fmt::format("KV at position {} was not written by this sequence", step.start_position - 1));
      hash = prev.prefix_hash;
    }
    const int32_t n = static_cast<int32_t>(step.tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      const int32_t p = step.start_position + i;
      const uint64_t parent = hash;
      hash = mix(hash ^ (static_cast<uint64_t>(step.tokens[i]) << 20) ^ static_cast<uint64_t>(p));
      for (int g : {sliding, full}) slot(g, step.block_tables[g], p) = Slot{p, g, hash, parent};
      // Read back everything this query attends to: the window in the sliding group, all of it in the full one.
      for (int g : {sliding, full}) {
        const int32_t lo = g == sliding ? std::max(0, p - config_.sliding_window + 1) : 0;
        uint64_t expected_parent = 0;
        for (int32_t q = lo; q <= p; ++q) {
          const Slot& s = slot(g, step.block_tables[g], q);
          if (s.position != q || s.group != g)
            throw std::logic_error(fmt::format("group {}: KV slot for position {} holds position {} of group {}", g, q,
                                               s.position, s.group));
          if (q > lo && s.parent_hash != expected_parent)
            throw std::logic_error(fmt::format("group {}: KV at position {} belongs to another token prefix", g, q));
          expected_parent = s.prefix_hash;
        }
        if (slot(g, step.block_tables[g], p).prefix_hash != hash)
          throw std::logic_error("KV slot overwritten within the step");
      }
      ++tokens_;
      if (i < n - step.num_logits) continue;
      ++output.rows;
      int32_t token = static_cast<int32_t>(hash % config_.vocab_size);
      if (step.sampling != nullptr && !step.sampling->greedy()) {
        const uint64_t index = step.sample_index + (i - (n - step.num_logits));
        token = static_cast<int32_t>(mix(hash ^ mix(step.sampling->seed) ^ mix(index)) % config_.vocab_size);
      }
      output.sampled.push_back(step.sampling != nullptr ? token : -1);
    }
  }
}

}  // namespace moeserve::testing
