// A draft model's own paged KV, as bookkeeping only (the drafter owns the memory): per sequence, the blocks of
// the drafter's pool that hold its slots and how many of those slots hold committed positions; and a prefix
// cache over full blocks, so that a new sequence sharing a prefix with earlier ones starts from their KV (the
// engine lets the target's prefix-cache hit reach only as far as the drafter's). Shared by the CPU and GPU EAGLE-3
// drafters.
//
// Keys: the draft's KV at position p is computed from the target's feature at p (which depends on tokens
// [0, p]) and the embedding of the token at p + 1, so a full block of positions [b bs, (b + 1) bs) depends on
// tokens [0, (b + 1) bs]: one token more than the target's block b. Its key chains the target's block hash with
// that token. A cached block is never rewritten: speculative slots lie past the committed length, in the
// sequence's own blocks, and a rollback into a cached block continues in a copy of its kept slots (the engine
// rolls back only to the committed length or, after preemption, to a block boundary, so it never needs one).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runner/drafter.h"
#include "runner/kv_blocks.h"

namespace moeserve::speculative {

struct DraftSequenceKv {
  std::vector<int32_t> blocks;
  int32_t length = 0;           // slots [0, length) hold committed positions
  std::vector<int32_t> tokens;  // the tokens at positions [0, length] (the last: the newest, not yet consumed)
  std::vector<uint64_t> hashes;  // the target's block hashes (kv_blocks.h) of the full blocks of `tokens` so far
  int32_t registered = 0;        // leading blocks offered to the prefix cache
};

class DraftKvTables {
 public:
  // Copies slots [0, slots) of one pool block to another (the drafter owns the memory).
  using CopySlots = std::function<void(int32_t from_block, int32_t to_block, int32_t slots)>;
  // owner names the drafter in errors ("EAGLE-3 drafter").
  DraftKvTables(int64_t num_blocks, int block_size, std::string owner, CopySlots copy_slots);

  int block_size() const { return pool_.block_size(); }
  int64_t num_blocks() const { return pool_.num_blocks(); }
  int64_t num_available() const { return pool_.num_available(); }

  // The sequence's table, made empty on first use.
  DraftSequenceKv& sequence(uint64_t sequence_id) { return sequences_[sequence_id]; }
  // Committed positions of the sequence (0 for one it does not know).
  int32_t cached_positions(uint64_t sequence_id) const;
  // Forgets the sequence and gives its blocks back (its full blocks stay cached until evicted).
  void release(uint64_t sequence_id);
  // Keeps slots [0, length): later blocks go back to the pool. Fails naming the sequence when a copy is needed
  // (a rollback into a cached block) and the pool is full.
  void truncate(DraftSequenceKv& kv, int32_t length);
  // Blocks for slots [0, slots); fails naming the sequence when the pool is full.
  void reserve_slots(DraftSequenceKv& kv, int32_t slots, uint64_t sequence_id);
  // The start of a drafter call for one input: checks it (features of feature_width per new position, tokens in
  // the vocabulary, a start within what the sequence holds, a new position when a draft is asked for), rolls the
  // sequence back to its start and reserves slots for its new positions; returns the sequence's table.
  DraftSequenceKv& begin(const DraftInput& in, int64_t feature_width, int32_t vocab_size);
  // Positions [start, start + next_tokens.size()) now hold committed KV (start_token is the token at start; the
  // next tokens those after each position); full blocks whose key is known enter the prefix cache.
  void commit(DraftSequenceKv& kv, int32_t start, int32_t start_token, std::span<const int32_t> next_tokens);
  // A sequence about to start (any state it had is dropped) whose tokens begin as `tokens`: takes the longest run
  // of cached full blocks for it (at least one token of `tokens` is left after them) and returns the positions
  // they hold.
  int32_t match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens);

  // Positions served from the cache so far (for tests and metrics).
  int64_t hit_positions() const { return hit_positions_; }

 private:
  // The key of full block b of `tokens` (tokens.size() > (b + 1) bs); extends `hashes`, the target's block hash
  // chain over `tokens`, as far as block b.
  uint64_t block_key(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes, size_t b) const;

  KvBlockPool pool_;
  std::string owner_;
  CopySlots copy_slots_;
  std::unordered_map<uint64_t, DraftSequenceKv> sequences_;
  int64_t hit_positions_ = 0;
};

}  // namespace moeserve::speculative
