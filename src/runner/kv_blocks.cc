#include "runner/kv_blocks.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve {

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, finished with a 64-bit mix.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix_in = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix_in(parent);
  for (int32_t t : tokens) mix_in(static_cast<uint32_t>(t));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

KvBlockPool::KvBlockPool(int64_t num_blocks, int block_size)
    : block_size_(block_size),
      ref_count_(num_blocks, 0),
      idle_position_(num_blocks),
      is_idle_(num_blocks, false),
      key_of_block_(num_blocks) {
  MOESERVE_CHECK(num_blocks > 0 && block_size > 0, "KV pool needs positive block count and size ({} x {})",
                 num_blocks, block_size);
  // Hand out low block ids first (free_ is a stack).
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> KvBlockPool::allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!idle_.empty()) {
    block = idle_.front();
    idle_.pop_front();
    is_idle_[block] = false;
    cached_.erase(*key_of_block_[block]);
    key_of_block_[block].reset();
  } else {
    return std::nullopt;
  }
  ref_count_[block] = 1;
  return block;
}

void KvBlockPool::release(int32_t block) {
  MOESERVE_CHECK(block >= 0 && block < num_blocks() && ref_count_[block] > 0, "release of KV block {} that is not in use",
                 block);
  if (--ref_count_[block] > 0) return;
  if (key_of_block_[block]) {
    idle_.push_back(block);
    idle_position_[block] = std::prev(idle_.end());
    is_idle_[block] = true;
  } else {
    free_.push_back(block);
  }
}

std::optional<int32_t> KvBlockPool::acquire_cached(int group, uint64_t hash) {
  auto it = cached_.find(key(group, hash));
  if (it == cached_.end()) return std::nullopt;
  int32_t block = it->second;
  if (is_idle_[block]) {
    idle_.erase(idle_position_[block]);
    is_idle_[block] = false;
  }
  ++ref_count_[block];
  return block;
}

void KvBlockPool::register_full_block(int32_t block, int group, uint64_t hash) {
  if (key_of_block_[block] || cached_.contains(key(group, hash))) return;
  cached_.emplace(key(group, hash), block);
  key_of_block_[block] = key(group, hash);
}

bool KvBlockPool::all_released() const {
  return std::all_of(ref_count_.begin(), ref_count_.end(), [](int r) { return r == 0; }) &&
         num_available() == num_blocks();
}

}  // namespace moeserve
