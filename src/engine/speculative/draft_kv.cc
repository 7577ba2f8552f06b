#include "engine/speculative/draft_kv.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::speculative {
namespace {

constexpr int kGroup = 0;  // a draft head has one layer, so one KV group

}  // namespace

DraftKvTables::DraftKvTables(int64_t num_blocks, int block_size, std::string owner, CopySlots copy_slots)
    : pool_(num_blocks, block_size), owner_(std::move(owner)), copy_slots_(std::move(copy_slots)) {}

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
  const int bs = pool_.block_size();
  const int32_t b = length / bs;
  if (length < kv.length && length % bs != 0 && b < kv.registered) {
    // The block holding position `length` is in the prefix cache, maybe shared: go on in a copy of its kept slots.
    const auto copy = pool_.allocate();
    MOESERVE_CHECK(copy.has_value(), "{}: KV pool of {} blocks is full (rolling back to position {} needs a block)",
                   owner_, pool_.num_blocks(), length);
    copy_slots_(kv.blocks[b], *copy, length % bs);
    pool_.release(kv.blocks[b]);
    kv.blocks[b] = *copy;
  }
  kv.length = std::min(kv.length, length);
  kv.tokens.resize(std::min<size_t>(kv.tokens.size(), static_cast<size_t>(kv.length) + 1));
  kv.keys.resize(std::min<size_t>(kv.keys.size(), static_cast<size_t>(kv.length / bs)));
  kv.registered = std::min(kv.registered, kv.length / bs);
  const size_t keep = (static_cast<size_t>(length) + bs - 1) / bs;
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

uint64_t DraftKvTables::block_key(std::span<const int32_t> tokens, std::vector<uint64_t>& target_hashes,
                                  size_t b) const {
  const size_t bs = static_cast<size_t>(pool_.block_size());
  while (target_hashes.size() <= b) {
    const size_t i = target_hashes.size();
    target_hashes.push_back(block_hash(i == 0 ? 0 : target_hashes[i - 1], tokens.subspan(i * bs, bs)));
  }
  return block_hash(target_hashes[b], tokens.subspan((b + 1) * bs, 1));
}

void DraftKvTables::commit(DraftSequenceKv& kv, int32_t start, int32_t start_token,
                           std::span<const int32_t> next_tokens) {
  MOESERVE_CHECK(start <= kv.length && static_cast<size_t>(start) <= kv.tokens.size(),
                 "{}: positions from {} committed after {} of {}", owner_, start, kv.length, kv.tokens.size());
  kv.tokens.resize(static_cast<size_t>(start));
  kv.tokens.push_back(start_token);
  kv.tokens.insert(kv.tokens.end(), next_tokens.begin(), next_tokens.end());
  kv.length = start + static_cast<int32_t>(next_tokens.size());
  const int bs = pool_.block_size();
  // The target's block hashes are recomputed from the tokens on the way (cheap next to a drafting step).
  std::vector<uint64_t> target_hashes;
  while (kv.registered < kv.length / bs) {
    const size_t b = static_cast<size_t>(kv.registered);
    if (kv.keys.size() <= b) kv.keys.push_back(block_key(kv.tokens, target_hashes, b));
    pool_.register_full_block(kv.blocks[b], kGroup, kv.keys[b]);
    ++kv.registered;
  }
}

int32_t DraftKvTables::match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) {
  release(sequence_id);  // whatever it held is superseded
  DraftSequenceKv& kv = sequences_[sequence_id];
  const size_t bs = static_cast<size_t>(pool_.block_size());
  std::vector<uint64_t> target_hashes;
  for (size_t b = 0; (b + 1) * bs < tokens.size(); ++b) {
    const uint64_t key = block_key(tokens, target_hashes, b);
    const auto block = pool_.acquire_cached(kGroup, key);
    if (!block) break;
    kv.blocks.push_back(*block);
    kv.keys.push_back(key);
  }
  kv.registered = static_cast<int32_t>(kv.blocks.size());
  kv.length = static_cast<int32_t>(kv.blocks.size() * bs);
  kv.tokens.assign(tokens.begin(), tokens.begin() + kv.length + (kv.length > 0 ? 1 : 0));
  hit_positions_ += kv.length;
  return kv.length;
}

}  // namespace moeserve::speculative
