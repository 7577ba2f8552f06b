// The block pool: reference counts, the prefix cache and its LRU eviction.
#include <gtest/gtest.h>

#include "runner/kv_blocks.h"
#include "util/error.h"

namespace moeserve {
namespace {

TEST(KvBlockPool, AllocatesUntilEmptyAndReleasesBack) {
  KvBlockPool pool(4, 16);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(*pool.allocate());
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_available(), 0);
  for (int32_t b : blocks) pool.release(b);
  EXPECT_TRUE(pool.all_released());
  EXPECT_THROW(pool.release(blocks[0]), Error);  // double release is caught
}

TEST(KvBlockPool, CachedBlocksAreSharedAndSurviveUntilEvicted) {
  KvBlockPool pool(3, 16);
  int32_t a = *pool.allocate();
  pool.register_full_block(a, 0, 111);
  EXPECT_TRUE(pool.is_cached(0, 111));
  EXPECT_FALSE(pool.is_cached(1, 111));  // groups are separate
  auto shared = pool.acquire_cached(0, 111);
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(*shared, a);
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.release(a);
  pool.release(a);
  EXPECT_TRUE(pool.all_released());
  EXPECT_TRUE(pool.is_cached(0, 111));  // idle, still reusable
  EXPECT_EQ(*pool.acquire_cached(0, 111), a);
  pool.release(a);
  // Using up the free blocks evicts the idle cached one last.
  int32_t b = *pool.allocate(), c = *pool.allocate();
  EXPECT_NE(b, a);
  EXPECT_NE(c, a);
  EXPECT_TRUE(pool.is_cached(0, 111));
  int32_t d = *pool.allocate();
  EXPECT_EQ(d, a);
  EXPECT_FALSE(pool.is_cached(0, 111));
}

TEST(KvBlockPool, EvictsLeastRecentlyReleasedFirst) {
  KvBlockPool pool(3, 4);
  int32_t x = *pool.allocate(), y = *pool.allocate(), z = *pool.allocate();
  pool.register_full_block(x, 0, 1);
  pool.register_full_block(y, 0, 2);
  pool.register_full_block(z, 0, 3);
  pool.release(y);
  pool.release(x);
  pool.release(z);
  EXPECT_EQ(*pool.allocate(), y);
  EXPECT_FALSE(pool.is_cached(0, 2));
  EXPECT_TRUE(pool.is_cached(0, 1));
  EXPECT_EQ(*pool.allocate(), x);
}

TEST(KvBlockPool, BlockHashChainsThePrefix) {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  EXPECT_EQ(block_hash(0, a), block_hash(0, a));
  EXPECT_NE(block_hash(0, a), block_hash(0, b));
  EXPECT_NE(block_hash(7, a), block_hash(0, a));
}

}  // namespace
}  // namespace moeserve
