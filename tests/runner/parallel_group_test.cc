// The in-process communicator (runner/parallel/in_process_group.h) and the model's split over ranks
// (runner/parallel/rank_shard.h): sums within fp32 rounding of a double-precision sum and the same bits on every
// rank, gathers in rank order, a disagreement or an abort failing every rank instead of hanging, and vLLM's
// divisibility errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "model/gpt_oss/make_tiny.h"
#include "runner/parallel/group_aborted.h"
#include "runner/parallel/in_process_group.h"
#include "runner/parallel/rank_shard.h"
#include "runner/parallel/vocab_best.h"
#include "sampling/sampler.h"
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

// The distributed argmax's merge (vocab_best.h, the CPU and CUDA ranks' rule): each rank's first maximum over its
// slice, then the lowest id among equal maxima, is the argmax of the whole row, ties across slices included, for
// vocabularies that do not divide by the rank count.
std::vector<VocabBest> rank_bests(const std::vector<float>& logits, int64_t rows, int64_t vocab, int ranks) {
  std::vector<VocabBest> all(rows * ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    const IndexRange slice = split_range(vocab, ranks, rank);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> mine(logits.data() + r * vocab + slice.begin, slice.size());
      const int32_t i = argmax(mine);
      all[rank * rows + r] = {mine[i], static_cast<int32_t>(slice.begin + i)};
    }
  }
  return all;
}

TEST(VocabBest, MergingTheRanksBestsIsTheWholeRowsArgmax) {
  std::mt19937 rng(7);
  for (int64_t vocab : {5, 11, 64, 1001})
    for (int ranks : {1, 2, 3, 4, 5}) {
      if (vocab < ranks) continue;
      const int64_t rows = 40;
      std::vector<float> logits(rows * vocab);
      // Few distinct values, so that maxima tie within and across slices.
      std::uniform_int_distribution<int> level(0, 3);
      for (float& x : logits) x = static_cast<float>(level(rng));
      for (int64_t r = 0; r < 4; ++r)  // rows whose maximum is one id: the last, the first, each slice's first
        logits[r * vocab + (r == 0 ? vocab - 1 : r == 1 ? 0 : split_range(vocab, ranks, ranks - 1).begin)] = 9.0f;
      const std::vector<VocabBest> all = rank_bests(logits, rows, vocab, ranks);
      for (int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row(logits.data() + r * vocab, vocab);
        const VocabBest winner = merge_vocab_best(all.data(), rows, ranks, r);
        EXPECT_EQ(winner.token, argmax(row)) << "vocab " << vocab << " over " << ranks << " ranks, row " << r;
        EXPECT_EQ(winner.value, row[argmax(row)]);
      }
    }
}

TEST(VocabBest, TiesAcrossRanksGoToTheLowestIdAndAllMinusInfinityToIdZero) {
  // vocab 7 over 3 ranks: slices [0, 3), [3, 5), [5, 7).
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1, 2, 0, 2, 2, 1, 2,            // 2 at ids 1, 3, 4, 6: id 1
                                     0, 0, 0, 3, 1, 3, 3,            // 3 at ids 3, 5, 6: id 3
                                     -inf, -inf, -inf, -inf, -inf, -inf, -inf};
  const std::vector<VocabBest> all = rank_bests(logits, 3, 7, 3);
  EXPECT_EQ(merge_vocab_best(all.data(), 3, 3, 0).token, 1);
  EXPECT_EQ(merge_vocab_best(all.data(), 3, 3, 1).token, 3);
  EXPECT_EQ(merge_vocab_best(all.data(), 3, 3, 2).token, 0);
  EXPECT_EQ(argmax(std::span<const float>(logits).subspan(14, 7)), 0);
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
