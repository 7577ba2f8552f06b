// The in-process communicator (runner/parallel/in_process_group.h) and the model's split over ranks
// (runner/parallel/rank_shard.h): sums within fp32 rounding of a double-precision sum and the same bits on every
// rank, gathers in rank order, a disagreement or an abort failing every rank instead of hanging, and vLLM's
// divisibility errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "model/gpt_oss/make_tiny.h"
#include "runner/parallel/group_aborted.h"
#include "runner/parallel/in_process_group.h"
#include "runner/parallel/rank_shard.h"
#include "util/error.h"

namespace moeserve {
namespace {

// Runs body(rank) on one thread per rank; returns each rank's error message ("" when it returned).
template <typename Body>
std::vector<std::string> on_every_rank(int n, Body body) {
  std::vector<std::string> errors(n);
  std::vector<std::jthread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  threads.clear();
  return errors;
}

TEST(InProcessGroup, AllReduceSumsWithinRoundingAndGivesEveryRankTheSameBits) {
  for (int n : {1, 2, 3, 4}) {
    InProcessGroup group(n);
    constexpr size_t kCount = 1000;
    std::vector<std::vector<float>> data(n, std::vector<float>(kCount));
    std::mt19937 rng(n);
    std::normal_distribution<float> normal(0.0f, 10.0f);
    std::vector<double> exact(kCount, 0.0);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < kCount; ++i) exact[i] += data[r][i] = normal(rng);
    for (int round = 0; round < 3; ++round) {  // the group is reusable, and each round sums the previous sums
      const auto errors = on_every_rank(n, [&](int r) { group.rank(r).all_reduce_sum(data[r]); });
      for (const auto& e : errors) ASSERT_EQ(e, "");
      for (int r = 1; r < n; ++r) ASSERT_EQ(data[r], data[0]) << "rank " << r;
      for (size_t i = 0; i < kCount; ++i) {
        const double bound = 4.0 * n * std::numeric_limits<float>::epsilon() * std::abs(exact[i]) + 1e-5;
        ASSERT_NEAR(data[0][i], exact[i], bound) << "n " << n << " round " << round << " element " << i;
      }
      for (size_t i = 0; i < kCount; ++i) exact[i] = static_cast<double>(data[0][i]) * n;
    }
  }
}

TEST(InProcessGroup, AllGatherConcatenatesInRankOrder) {
  constexpr int n = 3;
  InProcessGroup group(n);
  std::vector<std::vector<std::byte>> all(n, std::vector<std::byte>(n * 5));
  const auto errors = on_every_rank(n, [&](int r) {
    std::vector<std::byte> mine(5);
    for (int i = 0; i < 5; ++i) mine[i] = static_cast<std::byte>(10 * r + i);
    group.rank(r).all_gather(mine, all[r]);
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < n * 5; ++j) EXPECT_EQ(static_cast<int>(all[r][j]), 10 * (j / 5) + j % 5);
}

TEST(InProcessGroup, RanksThatDisagreeAllFailNamingTheSizes) {
  InProcessGroup group(3);
  const auto errors = on_every_rank(3, [&](int r) {
    std::vector<float> data(r == 1 ? 7 : 8, 1.0f);
    group.rank(r).all_reduce_sum(data);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("ranks disagree on a collective"), std::string::npos) << e;
  EXPECT_NE(errors[0].find("28 bytes"), std::string::npos) << errors[0];
  // An abort outlives the failed collective until reset.
  std::vector<float> one(1, 1.0f);
  EXPECT_THROW(group.rank(0).all_reduce_sum(one), GroupAborted);
  group.reset();
  const auto again = on_every_rank(3, [&](int r) {
    std::vector<float> data(2, static_cast<float>(r));
    group.rank(r).all_reduce_sum(data);
    MOESERVE_CHECK(data[0] == 3.0f && data[1] == 3.0f, "rank {} summed {}", r, data[0]);
  });
  for (const auto& e : again) EXPECT_EQ(e, "");
}

TEST(InProcessGroup, AnAbortReleasesRanksWaitingInACollective) {
  InProcessGroup group(3);
  const auto errors = on_every_rank(3, [&](int r) {
    if (r == 2) {  // fails before its collective: the two others are (or will be) waiting for it
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      group.rank(r).abort("rank 2 of 3 failed: bad token");
      throw Error("bad token");
    }
    std::vector<float> data(4, 1.0f);
    group.rank(r).all_reduce_sum(data);
  });
  EXPECT_NE(errors[0].find("rank 2 of 3 failed: bad token"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 2 of 3 failed: bad token"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "bad token");
}

TEST(SplitRange, CoversTheRangeInNearEqualContiguousPieces) {
  for (int64_t total : {0, 1, 7, 64, 201088})
    for (int parts : {1, 2, 3, 4, 8}) {
      int64_t next = 0, longest = 0, shortest = total;
      for (int p = 0; p < parts; ++p) {
        const IndexRange r = split_range(total, parts, p);
        ASSERT_EQ(r.begin, next);
        next = r.end;
        longest = std::max(longest, r.size());
        shortest = std::min(shortest, r.size());
        if (p > 0) {
          ASSERT_LE(r.size(), split_range(total, parts, 0).size());
        }
      }
      EXPECT_EQ(next, total);
      EXPECT_LE(longest - shortest, 1);
    }
}

TEST(RankShard, SplitsHeadsBlocksExpertsAndVocabulary) {
  TinyModelOptions options;
  options.heads = 6;
  options.kv_heads = 3;
  options.intermediate = 128;
  const ModelConfig config = tiny_model_config(options);
  int64_t heads = 0, columns = 0, vocab = 0;
  for (int r = 0; r < 3; ++r) {
    const RankShard shard = rank_shard(config, {3, false}, r);
    EXPECT_EQ(shard.heads.size(), 2);
    EXPECT_EQ(shard.kv_heads.size(), 1);
    EXPECT_EQ(shard.heads.begin, shard.kv_heads.begin * 2);
    EXPECT_EQ(shard.intermediate.begin % 32, 0);
    EXPECT_EQ(shard.intermediate.size() % 32, 0);
    EXPECT_EQ(shard.experts.size(), config.num_experts);
    heads += shard.heads.size();
    columns += shard.intermediate.size();
    vocab += shard.vocab.size();
  }
  EXPECT_EQ(heads, config.num_heads);
  EXPECT_EQ(columns, config.intermediate_size);
  EXPECT_EQ(vocab, config.vocab_size);
  const RankShard ep = rank_shard(config, {3, true}, 2);
  EXPECT_EQ(ep.intermediate.size(), config.intermediate_size);
  EXPECT_EQ(ep.experts.end, config.num_experts);
}

TEST(RankShard, ModelsThatDoNotSplitFailInVllmsWords) {
  const ModelConfig config = tiny_model_config({});  // 4 heads, 2 KV heads, 2 MXFP4 blocks, 8 experts
  auto message = [&](ParallelConfig parallel) {
    try {
      check_parallel_config(config, parallel);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message({2, false}), "");
  EXPECT_NE(message({3, false}).find("key-value heads (2) must be divisible by tensor parallel size (3)"),
            std::string::npos);
  EXPECT_NE(message({0, false}).find("--tensor-parallel-size 0"), std::string::npos);
  EXPECT_NE(message({1, true}).find("give a size above 1"), std::string::npos);
  TinyModelOptions narrow;
  narrow.kv_heads = 4;
  narrow.intermediate = 32;
  const ModelConfig one_block = tiny_model_config(narrow);
  EXPECT_THROW(check_parallel_config(one_block, {2, false}), Error);
  EXPECT_NO_THROW(check_parallel_config(one_block, {2, true}));
}

}  // namespace
}  // namespace moeserve
