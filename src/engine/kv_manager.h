// Block tables of sequences over the shared block pool, per KV group: allocation for the next tokens, the
// prefix-cache lookup at admission, registration of newly filled blocks, and the sliding-window rule that gives
// back blocks a sliding group's window can no longer see.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sequence.h"
#include "runner/kv_blocks.h"
#include "runner/runner.h"

namespace moeserve {

class KvCacheManager {
 public:
  // window: the sliding window of the model (used for the groups of kind sliding).
  KvCacheManager(const KvGroups& groups, int window, int64_t num_blocks, int block_size, bool prefix_caching);

  int block_size() const { return pool_.block_size(); }
  int num_groups() const { return static_cast<int>(group_kinds_.size()); }
  const KvBlockPool& pool() const { return pool_; }

  // Blocks a sequence of `tokens` tokens holds at most (all groups), for admission checks.
  int64_t blocks_needed(int64_t tokens) const;

  // At admission: reuses cached blocks for the longest cached prefix of seq.tokens (never all of it, so at least
  // one token is computed and yields logits, nor past seq.max_prefix_hit()). A speculating sequence new to the
  // drafter first takes what the drafter's own prefix cache holds (Drafter::match_prefix), which bounds the hit.
  // Sets num_computed and returns the number of tokens hit.
  int match_prefix(Sequence& seq);
  // The drafter consulted by match_prefix (none: speculating sequences hit only what their drafter was fed).
  void set_drafter(speculative::Drafter* drafter) { drafter_ = drafter; }
  // Ensures seq's tables cover the next `new_tokens` tokens; false (and no change) when the pool is short.
  bool allocate(Sequence& seq, int new_tokens);
  // After a step: offers newly full, computed blocks to the prefix cache, and gives back sliding-window blocks
  // that the next token's window no longer reaches.
  void commit(Sequence& seq);
  // After a verify step rolled num_computed back below what was allocated: gives back the blocks past
  // num_computed (they hold only rejected draft tokens' KV and were never offered to the prefix cache).
  void truncate(Sequence& seq);
  // Gives back every block of seq and clears its tables (finish, cancel, preemption).
  void release(Sequence& seq);

  uint64_t prefix_queried_tokens() const { return queried_tokens_; }
  uint64_t prefix_hit_tokens() const { return hit_tokens_; }

 private:
  // First logical block a query at `position` reads in group g (0 for full attention).
  int64_t first_visible_block(int group, int64_t position) const;
  void extend_hashes(Sequence& seq, int64_t full_blocks) const;

  KvBlockPool pool_;
  speculative::Drafter* drafter_ = nullptr;
  std::vector<AttentionKind> group_kinds_;
  int window_;
  bool prefix_caching_;
  uint64_t queried_tokens_ = 0;
  uint64_t hit_tokens_ = 0;
};

}  // namespace moeserve
