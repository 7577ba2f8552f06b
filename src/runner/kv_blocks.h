// The paged KV cache's block pool: fixed-size blocks with reference counts, and the prefix cache over them. The
// engine's KV manager allocates the target's blocks from one; each draft head keeps one of its own (draft_kv.h),
// keyed by the same block hash.
//
// A block is free (no owner, no contents worth keeping), in use (ref_count > 0), or cached-idle (ref_count 0 but
// holding the KV of a known token prefix, kept for reuse until evicted, least recently released first).
// Prefix cache keys: a full block's hash covers its tokens and every token before it (the parent's hash), and
// the KV group it belongs to, since each group's KV lives in its own blocks.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace moeserve {

// Hash of a full block: its tokens chained to the hash of the block before (0 for the first block).
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

class KvBlockPool {
 public:
  KvBlockPool(int64_t num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(ref_count_.size()); }
  // Blocks that allocate() can hand out now: free plus cached-idle (evictable).
  int64_t num_available() const { return static_cast<int64_t>(free_.size() + idle_.size()); }
  int64_t num_in_use() const { return num_blocks() - num_available(); }

  // A block for new KV: a free one, else the least recently used cached-idle one (dropped from the cache).
  std::optional<int32_t> allocate();
  // Drops one reference; at zero the block becomes cached-idle if it holds a cached prefix, else free.
  void release(int32_t block);
  // The cached block for (group, hash), with a reference taken; nullopt when absent. Does not count statistics.
  std::optional<int32_t> acquire_cached(int group, uint64_t hash);
  bool is_cached(int group, uint64_t hash) const { return cached_.contains(key(group, hash)); }
  // Records that `block` (in use, full, computed) holds the prefix with this hash. A prefix already cached in
  // another block keeps that block.
  void register_full_block(int32_t block, int group, uint64_t hash);

  int ref_count(int32_t block) const { return ref_count_.at(block); }
  // True when no block is referenced: every block is free or cached-idle (the leak check).
  bool all_released() const;

 private:
  struct Key {
    int group;
    uint64_t hash;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return k.hash * 31 + static_cast<size_t>(k.group); }
  };
  static Key key(int group, uint64_t hash) { return {group, hash}; }

  int block_size_;
  std::vector<int> ref_count_;
  std::vector<int32_t> free_;
  std::list<int32_t> idle_;  // cached-idle blocks, least recently released first
  std::vector<std::list<int32_t>::iterator> idle_position_;
  std::vector<bool> is_idle_;
  std::unordered_map<Key, int32_t, KeyHash> cached_;
  std::vector<std::optional<Key>> key_of_block_;
};

}  // namespace moeserve
