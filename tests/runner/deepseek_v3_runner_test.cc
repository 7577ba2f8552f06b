// The DeepSeek-V3 CPU runner: against an independent double-precision reading of transformers' model (both MLA
// forms), the absorbed form against the naive one within fp32 rounding, the same bits alone, in a batch and in
// chunks over scattered blocks, tree verification against causal chains with move_kv_slots, and bad steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "deepseek_test_util.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/deepseek_v3_reference.h"
#include "runner/sequence_step.h"
#include "util/error.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr int kBlockSize = 8;

std::shared_ptr<const deepseek_v3::Checkpoint> small_checkpoint() { return testing::small_deepseek_checkpoint(); }

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = static_cast<int32_t>(rng() % 1024);
  return p;
}

// Blocks [first, first + count) as one sequence's table.
std::vector<std::vector<int32_t>> table(int32_t first, int32_t count) {
  std::vector<int32_t> t(count);
  std::iota(t.begin(), t.end(), first);
  return {t};
}

ForwardOutput run(ModelRunner& runner, const std::vector<SequenceStep>& steps, std::vector<int> capture = {}) {
  ForwardBatch batch;
  batch.sequences = steps;
  batch.capture_layers = std::move(capture);
  ForwardOutput out;
  runner.forward(batch, out);
  return out;
}

TEST(DeepseekV3CpuRunner, MatchesThePlainReferenceInBothForms) {
  const auto checkpoint = small_checkpoint();
  const std::vector<int32_t> prompt = prompt_of(21, 1);
  const testing::ReferenceOutput ref = testing::reference_forward(*checkpoint, prompt);
  for (cpu::MlaForm form : {cpu::MlaForm::naive, cpu::MlaForm::absorbed}) {
    DeepseekV3CpuRunner runner(checkpoint, 2, form);
    runner.allocate_kv_cache({kBlockSize, 8});
    const auto tables = table(0, 4);
    const ForwardOutput out = run(runner, {testing::sequence_step(prompt, 0, tables, 21)});
    EXPECT_LE(testing::worst_relative_error(out.logits, 21, ref.logits), 1e-5)
        << (form == cpu::MlaForm::naive ? "naive" : "absorbed");
    for (int r = 0; r < 21; ++r) {
      const auto best = std::max_element(ref.logits[r].begin(), ref.logits[r].end()) - ref.logits[r].begin();
      EXPECT_EQ(std::max_element(out.logits.begin() + r * 1024, out.logits.begin() + (r + 1) * 1024) -
                    (out.logits.begin() + r * 1024),
                best)
          << "argmax at position " << r;
    }
  }
}

TEST(DeepseekV3CpuRunner, AbsorbedEqualsNaiveWithinFp32Rounding) {
  const auto checkpoint = small_checkpoint();
  DeepseekV3CpuRunner naive(checkpoint, 2, cpu::MlaForm::naive), absorbed(checkpoint, 2, cpu::MlaForm::absorbed);
  naive.allocate_kv_cache({kBlockSize, 16});
  absorbed.allocate_kv_cache({kBlockSize, 16});
  const std::vector<int32_t> prompt = prompt_of(60, 2);
  const auto tables = table(0, 8);
  const ForwardOutput a = run(naive, {testing::sequence_step(prompt, 0, tables, 60)});
  const ForwardOutput b = run(absorbed, {testing::sequence_step(prompt, 0, tables, 60)});
  double worst = 0;
  for (int r = 0; r < 60; ++r) {
    double diff = 0, norm = 0;
    for (int j = 0; j < 1024; ++j) {
      diff += std::pow(double(a.logits[r * 1024 + j]) - b.logits[r * 1024 + j], 2);
      norm += std::pow(double(b.logits[r * 1024 + j]), 2);
    }
    worst = std::max(worst, std::sqrt(diff / norm));
  }
  EXPECT_LE(worst, 2e-6);
  EXPECT_GT(worst, 0.0);  // two different computations, not one run twice
}

TEST(DeepseekV3CpuRunner, SameBitsAloneInABatchAndInChunks) {
  for (cpu::MlaForm form : {cpu::MlaForm::naive, cpu::MlaForm::absorbed}) {
    DeepseekV3CpuRunner runner(small_checkpoint(), 2, form);
    runner.allocate_kv_cache({kBlockSize, 64});
    const std::vector<int32_t> a = prompt_of(30, 3), b = prompt_of(13, 4), c = prompt_of(3, 5);
    const auto ta = table(0, 4), tb = table(4, 2), tc = table(6, 1);
    const ForwardOutput alone = run(runner, {testing::sequence_step(a, 0, ta, 30)});
    const ForwardOutput batched = run(runner, {testing::sequence_step(b, 0, tb, 13), testing::sequence_step(a, 0, ta, 30),
                                               testing::sequence_step(c, 0, tc, 3)});
    EXPECT_TRUE(std::equal(alone.logits.begin(), alone.logits.end(), batched.logits.begin() + 13 * 1024));
    // Chunks of 7 over scattered blocks.
    std::vector<int32_t> scattered = {40, 12, 33, 20};
    const std::vector<std::vector<int32_t>> ts = {scattered};
    std::vector<float> chunked;
    for (int begin = 0; begin < 30; begin += 7) {
      const int n = std::min(7, 30 - begin);
      const ForwardOutput out = run(runner, {testing::sequence_step(std::span(a).subspan(begin, n), begin, ts, n)});
      chunked.insert(chunked.end(), out.logits.begin(), out.logits.end());
    }
    EXPECT_EQ(chunked, alone.logits);
  }
}

TEST(DeepseekV3CpuRunner, TreeNodesMatchTheirPathsRunCausally) {
  DeepseekV3CpuRunner runner(small_checkpoint(), 2);
  runner.allocate_kv_cache({kBlockSize, 32});
  const int H = runner.config().hidden_size, L = runner.config().num_layers;
  const std::vector<int32_t> prompt = prompt_of(20, 6);
  const int32_t start = 19;
  const std::vector<int32_t> tokens{prompt.back(), 11, 12, 13, 14, 15, 16};
  const std::vector<int32_t> parent{-1, 0, 0, 1, 1, 2, 4};
  const auto tree_table = table(0, 4);
  run(runner, {testing::sequence_step(std::span(prompt).first(start), 0, tree_table, 1)});
  SequenceStep tree_step = testing::sequence_step(tokens, start, tree_table, 7);
  tree_step.tree_parent = parent;
  const ForwardOutput tree = run(runner, {tree_step}, {L - 1});
  const auto chain_table = table(8, 4);
  for (size_t node = 0; node < tokens.size(); ++node) {
    std::vector<int32_t> context(prompt.begin(), prompt.begin() + start), path;
    for (int32_t i = static_cast<int32_t>(node); i >= 0; i = parent[i]) path.insert(path.begin(), tokens[i]);
    context.insert(context.end(), path.begin(), path.end());
    const ForwardOutput chain = run(runner, {testing::sequence_step(context, 0, chain_table, 1)}, {L - 1});
    EXPECT_TRUE(std::equal(chain.logits.begin(), chain.logits.end(), tree.logits.begin() + node * 1024)) << node;
    EXPECT_TRUE(std::equal(tree.captured[0].begin() + node * H, tree.captured[0].begin() + (node + 1) * H,
                           chain.captured[0].end() - H))
        << node;
  }
  // Commit 0 -> 1 -> 4 -> 6 and decode one more token: the same bits as after the causal chain.
  const std::vector<KvSlotMove> moves{{start + 1, start + 1}, {start + 4, start + 2}, {start + 6, start + 3}};
  const std::vector<std::span<const int32_t>> spans{tree_table[0]};
  runner.move_kv_slots(spans, moves);
  const std::vector<int32_t> next{42};
  const ForwardOutput after_tree = run(runner, {testing::sequence_step(next, start + 4, tree_table, 1)});
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  for (int32_t i : {1, 4, 6}) context.push_back(tokens[i]);
  context.push_back(42);
  const ForwardOutput after_chain = run(runner, {testing::sequence_step(context, 0, chain_table, 1)});
  EXPECT_EQ(after_tree.logits, after_chain.logits);
}

TEST(DeepseekV3CpuRunner, BadStepsAreErrors) {
  DeepseekV3CpuRunner runner(small_checkpoint(), 1);
  EXPECT_THAT([&] { run(runner, {}); }, ThrowsMessage<Error>(HasSubstr("before allocate_kv_cache")));
  runner.allocate_kv_cache({kBlockSize, 4});
  EXPECT_EQ(runner.kv_block_bytes(kBlockSize), 3u * kBlockSize * (144 + 16) * sizeof(float));
  const std::vector<int32_t> bad{5, 2000};
  const auto t = table(0, 1);
  EXPECT_THAT([&] { run(runner, {testing::sequence_step(bad, 0, t, 1)}); },
              ThrowsMessage<Error>(HasSubstr("token id 2000 is outside the vocabulary of 1024")));
  const std::vector<int32_t> long_prompt(20, 3);
  EXPECT_THAT([&] { run(runner, {testing::sequence_step(long_prompt, 0, t, 1)}); },
              ThrowsMessage<Error>(HasSubstr("block table has 1 blocks, slot 8 needs 2")));
  const std::vector<std::vector<int32_t>> two_groups{{0}, {1}};
  EXPECT_THAT([&] { run(runner, {testing::sequence_step(bad, 0, two_groups, 1)}); },
              ThrowsMessage<Error>(HasSubstr("2 block tables for 1 KV groups")));
}

}  // namespace
}  // namespace moeserve
