#include "runner/draft_kv.h"

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
  kv.hashes.resize(std::min<size_t>(kv.hashes.size(), static_cast<size_t>(kv.length / bs)));
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

DraftSequenceKv& DraftKvTables::begin(const DraftInput& in, int64_t feature_width, int32_t vocab_size) {
  const int64_t n = static_cast<int64_t>(in.next_tokens.size());
  MOESERVE_CHECK(static_cast<int64_t>(in.features.size()) == n * feature_width,
                 "{}: sequence {} brings {} feature floats for {} tokens of width {}", owner_, in.sequence_id,
                 in.features.size(), n, feature_width);
  MOESERVE_CHECK(in.shape.num_draft_tokens == 0 || n > 0,
                 "{}: sequence {} asks for a draft without a new verified position", owner_, in.sequence_id);
  for (const int32_t token : in.next_tokens)
    MOESERVE_CHECK(token >= 0 && token < vocab_size, "{}: sequence {}: token {} is outside the vocabulary of {}",
                   owner_, in.sequence_id, token, vocab_size);
  DraftSequenceKv& kv = sequence(in.sequence_id);
  MOESERVE_CHECK(in.start_position >= 0 && in.start_position <= kv.length,
                 "{}: sequence {} brings features from position {}, but the drafter holds positions [0, {})", owner_,
                 in.sequence_id, in.start_position, kv.length);
  truncate(kv, in.start_position);
  reserve_slots(kv, in.start_position + static_cast<int32_t>(n), in.sequence_id);
  return kv;
}

uint64_t DraftKvTables::block_key(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes, size_t b) const {
  const size_t bs = static_cast<size_t>(pool_.block_size());
  while (hashes.size() <= b) {
    const size_t i = hashes.size();
    hashes.push_back(block_hash(i == 0 ? 0 : hashes[i - 1], tokens.subspan(i * bs, bs)));
  }
  return block_hash(hashes[b], tokens.subspan((b + 1) * bs, 1));
}

void DraftKvTables::commit(DraftSequenceKv& kv, int32_t start, int32_t start_token,
                           std::span<const int32_t> next_tokens) {
  MOESERVE_CHECK(start <= kv.length && static_cast<size_t>(start) <= kv.tokens.size(),
                 "{}: positions from {} committed after {} of {}", owner_, start, kv.length, kv.tokens.size());
  kv.tokens.resize(static_cast<size_t>(start));
  kv.hashes.resize(std::min<size_t>(kv.hashes.size(), static_cast<size_t>(start / pool_.block_size())));
  kv.tokens.push_back(start_token);
  kv.tokens.insert(kv.tokens.end(), next_tokens.begin(), next_tokens.end());
  kv.length = start + static_cast<int32_t>(next_tokens.size());
  const int bs = pool_.block_size();
  for (; kv.registered < kv.length / bs; ++kv.registered)
    pool_.register_full_block(kv.blocks[kv.registered], kGroup,
                              block_key(kv.tokens, kv.hashes, static_cast<size_t>(kv.registered)));
}

int32_t DraftKvTables::match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) {
  release(sequence_id);  // whatever it held is superseded
  DraftSequenceKv& kv = sequences_[sequence_id];
  const size_t bs = static_cast<size_t>(pool_.block_size());
  for (size_t b = 0; (b + 1) * bs < tokens.size(); ++b) {
    const auto block = pool_.acquire_cached(kGroup, block_key(tokens, kv.hashes, b));
    if (!block) break;
    kv.blocks.push_back(*block);
  }
  kv.registered = static_cast<int32_t>(kv.blocks.size());
  kv.hashes.resize(kv.blocks.size());
  kv.length = static_cast<int32_t>(kv.blocks.size() * bs);
  kv.tokens.assign(tokens.begin(), tokens.begin() + kv.length + (kv.length > 0 ? 1 : 0));
  hit_positions_ += kv.length;
  return kv.length;
}

}  // namespace moeserve::speculative
