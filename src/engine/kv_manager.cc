#include "engine/kv_manager.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve {

KvCacheManager::KvCacheManager(const KvGroups& groups, int window, int64_t num_blocks, int block_size,
                               bool prefix_caching)
    : pool_(num_blocks, block_size), group_kinds_(groups.kind_of_group), window_(window), prefix_caching_(prefix_caching) {}

int64_t KvCacheManager::first_visible_block(int group, int64_t position) const {
  if (group_kinds_[group] != AttentionKind::sliding) return 0;
  return std::max<int64_t>(0, position - window_ + 1) / block_size();
}

int64_t KvCacheManager::blocks_needed(int64_t tokens) const {
  const int64_t bs = block_size();
  int64_t total = 0;
  for (int g = 0; g < num_groups(); ++g) {
    int64_t span = tokens;
    // A sliding group holds the window plus the blocks being written, never more than the whole sequence.
    if (group_kinds_[g] == AttentionKind::sliding) span = std::min<int64_t>(tokens, window_ + 2 * bs);
    total += (span + bs - 1) / bs + (group_kinds_[g] == AttentionKind::sliding ? 1 : 0);
  }
  return total;
}

void KvCacheManager::extend_hashes(Sequence& seq, int64_t full_blocks) const {
  const int bs = block_size();
  while (static_cast<int64_t>(seq.full_block_hashes.size()) < full_blocks) {
    const size_t i = seq.full_block_hashes.size();
    uint64_t parent = i == 0 ? 0 : seq.full_block_hashes[i - 1];
    seq.full_block_hashes.push_back(block_hash(parent, std::span(seq.tokens).subspan(i * bs, bs)));
  }
}

int KvCacheManager::match_prefix(Sequence& seq) {
  MOESERVE_CHECK(seq.num_computed == 0 && seq.block_tables.empty(), "prefix match on a sequence that holds KV");
  seq.block_tables.assign(num_groups(), {});
  const int64_t length = static_cast<int64_t>(seq.tokens.size());
  queried_tokens_ += length;
  if (!prefix_caching_) return 0;
  if (drafter_ != nullptr && seq.speculates() && seq.draft_fed == 0)
    seq.draft_fed = drafter_->match_prefix(seq.id, seq.tokens);
  const int bs = block_size();
  // Candidate hit: k full blocks, with at least one token left to compute.
  const int64_t max_blocks = std::min<int64_t>(length - 1, seq.max_prefix_hit()) / bs;
  extend_hashes(seq, max_blocks);
  int64_t full_hit = 0;
  int full_group = -1;
  for (int g = 0; g < num_groups(); ++g)
    if (group_kinds_[g] != AttentionKind::sliding) full_group = g;
  if (full_group >= 0) {
    while (full_hit < max_blocks && pool_.is_cached(full_group, seq.full_block_hashes[full_hit])) ++full_hit;
  } else {
    full_hit = max_blocks;
  }
  // Largest k <= full_hit for which every sliding group still holds the blocks the next query can see.
  int64_t k = full_hit;
  for (; k > 0; --k) {
    bool ok = true;
    for (int g = 0; g < num_groups() && ok; ++g) {
      if (group_kinds_[g] != AttentionKind::sliding) continue;
      for (int64_t b = first_visible_block(g, k * bs); b < k && ok; ++b)
        ok = pool_.is_cached(g, seq.full_block_hashes[b]);
    }
    if (ok) break;
  }
  for (int g = 0; g < num_groups(); ++g) {
    const int64_t first = first_visible_block(g, k * bs);
    for (int64_t b = 0; b < k; ++b) {
      if (b < first) {
        seq.block_tables[g].push_back(-1);
        continue;
      }
      auto block = pool_.acquire_cached(g, seq.full_block_hashes[b]);
      MOESERVE_CHECK(block.has_value(), "prefix cache lost block {} of group {} during lookup", b, g);
      seq.block_tables[g].push_back(*block);
    }
  }
  seq.num_computed = static_cast<int>(k * bs);
  seq.registered_blocks = static_cast<int>(k);
  hit_tokens_ += k * bs;
  return static_cast<int>(k * bs);
}

bool KvCacheManager::allocate(Sequence& seq, int new_tokens) {
  if (seq.block_tables.empty()) seq.block_tables.assign(num_groups(), {});
  const int bs = block_size();
  const int64_t end = seq.num_computed + new_tokens;  // positions [0, end) must be mapped
  const int64_t needed_blocks = (end + bs - 1) / bs;
  std::vector<std::pair<int, int32_t>> taken;
  for (int g = 0; g < num_groups(); ++g) {
    auto& table = seq.block_tables[g];
    // A sliding group skips blocks that no query of this step can see.
    const int64_t first = first_visible_block(g, seq.num_computed);
    while (static_cast<int64_t>(table.size()) < needed_blocks) {
      if (static_cast<int64_t>(table.size()) < first) {
        table.push_back(-1);
        continue;
      }
      auto block = pool_.allocate();
      if (!block) {
        for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
          pool_.release(it->second);
          seq.block_tables[it->first].pop_back();
        }
        return false;
      }
      table.push_back(*block);
      taken.emplace_back(g, *block);
    }
  }
  return true;
}

void KvCacheManager::commit(Sequence& seq) {
  const int bs = block_size();
  const int64_t full = seq.num_computed / bs;
  if (prefix_caching_ && full > seq.registered_blocks) {
    extend_hashes(seq, full);
    for (int64_t b = seq.registered_blocks; b < full; ++b)
      for (int g = 0; g < num_groups(); ++g)
        if (seq.block_tables[g][b] >= 0) pool_.register_full_block(seq.block_tables[g][b], g, seq.full_block_hashes[b]);
    seq.registered_blocks = static_cast<int>(full);
  }
  for (int g = 0; g < num_groups(); ++g) {
    auto& table = seq.block_tables[g];
    const int64_t first = std::min<int64_t>(first_visible_block(g, seq.num_computed), table.size());
    for (int64_t b = 0; b < first; ++b)
      if (table[b] >= 0) {
        pool_.release(table[b]);
        table[b] = -1;
      }
  }
}

void KvCacheManager::truncate(Sequence& seq) {
  const int64_t keep = (seq.num_computed + block_size() - 1) / block_size();
  MOESERVE_CHECK(seq.registered_blocks <= keep, "sequence {}: truncating to {} blocks would drop {} cached ones", seq.id,
                 keep, seq.registered_blocks);
  for (auto& table : seq.block_tables)
    while (static_cast<int64_t>(table.size()) > keep) {
      if (table.back() >= 0) pool_.release(table.back());
      table.pop_back();
    }
}

void KvCacheManager::release(Sequence& seq) {
  for (auto& table : seq.block_tables)
    for (int32_t block : table)
      if (block >= 0) pool_.release(block);
  seq.block_tables.clear();
  seq.num_computed = 0;
  seq.registered_blocks = 0;
}

}  // namespace moeserve
