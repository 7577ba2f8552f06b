// DeepSeek-V3 over 2, 3 and 4 expert-parallel CPU ranks (make_deepseek_cpu_runner: attention and dense layers on
// every rank, the routed experts split, the shared expert on rank 0, the MoE output all-reduced) against the single
// DeepSeek CPU runner, which is proven against transformers: logits within fp32 reduction rounding through a
// prefill and decode steps, greedy continuations equal, and the split flags it cannot take refused.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "deepseek_test_util.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/sequence_step.h"
#include "runner/split_compare.h"
#include "util/error.h"

namespace moeserve {
namespace {

constexpr int kBlockSize = 8;

std::vector<std::vector<int32_t>> table(int32_t first, int32_t count) {
  std::vector<int32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return {t};
}

class DeepseekExpertParallel : public ::testing::TestWithParam<int> {};

TEST_P(DeepseekExpertParallel, LogitsAndGreedyTokensMatchOneRank) {
  auto checkpoint = testing::small_deepseek_checkpoint();
  ASSERT_GE(checkpoint->config().n_routed_experts, GetParam());
  DeepseekV3CpuRunner single(checkpoint, 2);
  auto split = make_deepseek_cpu_runner(checkpoint, {GetParam(), true}, 2);
  const KvCacheLayout layout{kBlockSize, 32};
  single.allocate_kv_cache(layout);
  split->allocate_kv_cache(layout);
  EXPECT_EQ(split->kv_block_bytes(kBlockSize), GetParam() * single.kv_block_bytes(kBlockSize));  // latents on each

  std::vector<int32_t> a(21), b(9);
  std::iota(a.begin(), a.end(), 100);
  std::iota(b.begin(), b.end(), 500);
  const auto table_a = table(0, 8), table_b = table(8, 8);
  ForwardBatch prefill;
  prefill.sequences = {testing::sequence_step(a, 0, table_a, 2), testing::sequence_step(b, 0, table_b, 1)};
  testing::expect_split_logits_close(testing::run_step(single, prefill).logits, testing::run_step(*split, prefill).logits, "prefill");

  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<int32_t> next_a{a.back()}, next_b{b.back()};
  std::vector<int32_t> single_tokens, split_tokens;
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> tokens[2] = {next_a, next_b};
    ForwardBatch decode;
    decode.sequences = {testing::sequence_step(tokens[0], 21 + step, table_a, 1),
                        testing::sequence_step(tokens[1], 9 + step, table_b, 1)};
    for (auto& s : decode.sequences) s.sampling = &greedy;
    const ForwardOutput one = testing::run_step(single, decode), many = testing::run_step(*split, decode);
    testing::expect_split_logits_close(one.logits, many.logits, "decode " + std::to_string(step));
    single_tokens.insert(single_tokens.end(), one.sampled.begin(), one.sampled.end());
    split_tokens.insert(split_tokens.end(), many.sampled.begin(), many.sampled.end());
    next_a = {one.sampled[0]};
    next_b = {one.sampled[1]};
  }
  EXPECT_EQ(split_tokens, single_tokens);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeepseekExpertParallel, ::testing::Values(2, 3, 4));

TEST(DeepseekExpertParallel, SplitsItCannotTakeAreRefused) {
  auto checkpoint = testing::small_deepseek_checkpoint();
  EXPECT_THROW(make_deepseek_cpu_runner(checkpoint, {2, false}, 1), Error);  // heads are not split yet
  EXPECT_THROW(make_deepseek_cpu_runner(checkpoint, {1, true}, 1), Error);
  EXPECT_THROW(make_deepseek_cpu_runner(checkpoint, {checkpoint->config().n_routed_experts + 1, true}, 1), Error);
}

}  // namespace
}  // namespace moeserve
