#include "engine/speculative/draft_kv.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::speculative {

DraftKvTables::DraftKvTables(int64_t num_blocks, int block_size, std::string owner)
    : pool_(num_blocks, block_size), owner_(std::move(owner)) {}

int32_t DraftKvTables::cached_positions(uint64_t sequence_id) const {
  auto it = sequences_.find(sequence_id);
  return it == sequences_.end() ? 0 : it->second.length;
}

void DraftKvTables::release(uint64_t sequence_id) {
  auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) return;
  truncate(it->second, 0);
  sequences_.erase(it);
}

void DraftKvTables::truncate(DraftSequenceKv& kv, int32_t length) {
  kv.length = std::min(kv.length, length);
  const size_t keep = (static_cast<size_t>(length) + pool_.block_size() - 1) / pool_.block_size();
  while (kv.blocks.size() > keep) {
    pool_.release(kv.blocks.back());
    kv.blocks.pop_back();
  }
}

void DraftKvTables::reserve_slots(DraftSequenceKv& kv, int32_t slots, uint64_t sequence_id) {
  while (static_cast<int64_t>(kv.blocks.size()) * pool_.block_size() < slots) {
    auto block = pool_.allocate();
    MOESERVE_CHECK(block.has_value(), "{}: KV pool of {} blocks is full (sequence {} needs {} slots)", owner_,
                   pool_.num_blocks(), sequence_id, slots);
    kv.blocks.push_back(*block);
  }
}

}  // namespace moeserve::speculative
