// The draft KV bookkeeping's prefix cache: a committed full block is found again by a new sequence whose tokens
// agree up to and including the token after the block (the draft's KV at a position depends on the next token),
// blocks stay cached after their sequence is released, and truncation never rewrites a cached block.
#include <gtest/gtest.h>

#include <numeric>

#include "runner/draft_kv.h"

namespace moeserve::speculative {
namespace {

constexpr int kBlock = 4;

struct Copy {
  int32_t from, to, slots;
  bool operator==(const Copy&) const = default;
};

// The tables with their block copies recorded.
struct Tables {
  std::vector<Copy> copies;
  DraftKvTables tables;
  explicit Tables(int64_t blocks)
      : tables(blocks, kBlock, "test drafter",
               [this](int32_t from, int32_t to, int32_t slots) { copies.push_back({from, to, slots}); }) {}
};

std::vector<int32_t> iota_tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Commits positions [0, n) of `tokens` for a sequence, as a drafter's extend step does.
void feed(DraftKvTables& tables, uint64_t id, const std::vector<int32_t>& tokens, int n) {
  DraftSequenceKv& kv = tables.sequence(id);
  tables.reserve_slots(kv, n, id);
  tables.commit(kv, 0, tokens[0], std::span(tokens).subspan(1, n));
}

TEST(DraftKvTables, CommittedFullBlocksAreMatchedByTheirTokensAndTheNextOne) {
  Tables t(32);
  DraftKvTables& tables = t.tables;
  const std::vector<int32_t> tokens = iota_tokens(20);
  feed(tables, 1, tokens, 10);  // positions [0, 10): blocks 0 and 1 are full, their next tokens (8, 9) known
  const DraftSequenceKv& first = tables.sequence(1);
  EXPECT_EQ(first.length, 10);
  EXPECT_EQ(first.registered, 2);

  // The same tokens: both full blocks (8 positions); at least one token is left.
  EXPECT_EQ(tables.match_prefix(2, tokens), 8);
  EXPECT_EQ(tables.sequence(2).blocks, std::vector<int32_t>(first.blocks.begin(), first.blocks.begin() + 2));
  EXPECT_EQ(tables.cached_positions(2), 8);
  // A different token at position 8 (the token after block 1) keeps block 0 only.
  std::vector<int32_t> other = tokens;
  other[8] = 7;
  EXPECT_EQ(tables.match_prefix(3, other), 4);
  // Too short to leave a token after block 1: block 0 only.
  EXPECT_EQ(tables.match_prefix(4, std::span(tokens).first(8)), 4);
  // A different first token: nothing.
  other = tokens;
  other[0] = 1;
  EXPECT_EQ(tables.match_prefix(5, other), 0);
  EXPECT_EQ(tables.hit_positions(), 16);
}

TEST(DraftKvTables, ReleasedBlocksStayCachedUntilTheyAreNeeded) {
  Tables t(4);
  DraftKvTables& tables = t.tables;
  const std::vector<int32_t> tokens = iota_tokens(12);
  feed(tables, 1, tokens, 9);  // three blocks: two full and registered, one partial
  tables.release(1);
  EXPECT_EQ(tables.num_available(), 4);
  EXPECT_EQ(tables.match_prefix(2, tokens), 8);
  tables.release(2);
  // A sequence that needs the whole pool evicts them; afterwards nothing matches.
  DraftSequenceKv& big = tables.sequence(3);
  tables.reserve_slots(big, 16, 3);
  EXPECT_THROW(tables.reserve_slots(big, 17, 3), std::exception);
  tables.release(3);
  EXPECT_EQ(tables.match_prefix(4, tokens), 0);
}

TEST(DraftKvTables, TruncationKeepsCachedBlocksIntact) {
  Tables t(32);
  DraftKvTables& tables = t.tables;
  const std::vector<int32_t> tokens = iota_tokens(20);
  feed(tables, 1, tokens, 13);
  DraftSequenceKv& kv = tables.sequence(1);
  // To its committed length, or to a block boundary (a target prefix hit, a recompute after preemption): no copy.
  tables.truncate(kv, 13);
  tables.truncate(kv, 8);
  EXPECT_EQ(kv.length, 8);
  EXPECT_EQ(kv.registered, 2);
  EXPECT_EQ(kv.tokens.size(), 9u);
  EXPECT_TRUE(t.copies.empty());
  // Into a cached block: the sequence goes on in a copy of the kept slots; the cached block stays as it was.
  const int32_t cached = kv.blocks[1];
  tables.truncate(kv, 6);
  ASSERT_EQ(t.copies.size(), 1u);
  EXPECT_EQ(t.copies[0], (Copy{cached, kv.blocks[1], 2}));
  EXPECT_NE(kv.blocks[1], cached);
  EXPECT_EQ(kv.registered, 1);
  EXPECT_EQ(tables.match_prefix(2, tokens), 12);  // blocks 0, 1 and 2 of the first history are all still cached
  // Recommitting from there with other tokens makes new keys for the blocks after it.
  std::vector<int32_t> next = iota_tokens(10, 500);
  tables.reserve_slots(kv, 16, 1);
  tables.commit(kv, 6, tokens[6], next);
  EXPECT_EQ(kv.length, 16);
  EXPECT_EQ(kv.registered, 4);
  std::vector<int32_t> changed(tokens.begin(), tokens.begin() + 7);
  changed.insert(changed.end(), next.begin(), next.end());
  changed.push_back(1);
  EXPECT_EQ(tables.match_prefix(3, changed), 16);
  EXPECT_EQ(tables.sequence(3).blocks[1], kv.blocks[1]);
}

}  // namespace
}  // namespace moeserve::speculative
