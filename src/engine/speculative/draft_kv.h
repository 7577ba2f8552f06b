// A draft model's own paged KV, as bookkeeping only (the drafter owns the
// memory): per sequence, the blocks of the drafter's pool that hold its slots
// and how many of those slots hold committed positions. Shared by the CPU and
// GPU EAGLE-3 drafters.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_blocks.h"

namespace moeserve::speculative {

struct DraftSequenceKv {
  std::vector<int32_t> blocks;
  int32_t length = 0;  // slots [0, length) hold committed positions
};

class DraftKvTables {
 public:
  // owner names the drafter in errors ("EAGLE-3 drafter").
  DraftKvTables(int64_t num_blocks, int block_size, std::string owner);

  int block_size() const { return pool_.block_size(); }
  int64_t num_blocks() const { return pool_.num_blocks(); }
  int64_t num_available() const { return pool_.num_available(); }

  // The sequence's table, made empty on first use.
  DraftSequenceKv& sequence(uint64_t sequence_id) { return sequences_[sequence_id]; }
  // Committed positions of the sequence (0 for one it does not know).
  int32_t cached_positions(uint64_t sequence_id) const;
  // Forgets the sequence and gives its blocks back.
  void release(uint64_t sequence_id);
  // Keeps slots [0, length): later blocks go back to the pool.
  void truncate(DraftSequenceKv& kv, int32_t length);
  // Blocks for slots [0, slots); fails naming the sequence when the pool is
  // full.
  void reserve_slots(DraftSequenceKv& kv, int32_t slots, uint64_t sequence_id);

 private:
  KvBlockPool pool_;
  std::string owner_;
  std::unordered_map<uint64_t, DraftSequenceKv> sequences_;
};

}  // namespace moeserve::speculative
