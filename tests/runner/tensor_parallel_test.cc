// GPT-OSS over 2, 3 and 4 ranks (TensorParallelCpuRunner, tensor and expert parallel) against the single CPU
// runner, which is itself proven against transformers: logits within fp32 reduction rounding through a prefill
// longer than the sliding window, a batch of decode steps and a tree step; greedy continuations, drawn by the
// distributed argmax without gathering logits, equal token for token; logprobs through the gathered rows; a bad
// step failing on every rank with the runner usable after it. Uneven splits (3 ranks over 3 MXFP4 blocks plus one,
// a vocabulary not divisible by 3) and the dense expert layout are among the cases.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cpu/tensor_parallel_runner.h"
#include "runner/sequence_step.h"
#include "runner/split_compare.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve {
namespace {

constexpr int kBlockSize = 8;
constexpr int kBlocksPerSequence = 12;

struct Case {
  const char* label;
  int ranks;
  bool expert_parallel;
  ExpertFormat format;
  int intermediate;
};

// Heads 8 over 4 KV heads: splits over 2 and 4 ranks; heads 6 over 3 KV heads for 3 ranks.
TinyModelOptions model_for(const Case& c) {
  TinyModelOptions options;
  options.heads = c.ranks == 3 ? 6 : 8;
  options.kv_heads = c.ranks == 3 ? 3 : 4;
  options.intermediate = c.intermediate;
  options.expert_format = c.format;
  return options;
}

struct Sequence {
  std::vector<std::vector<int32_t>> tables;
  Sequence(int groups, int index) : tables(groups) {
    for (int g = 0; g < groups; ++g)
      for (int b = 0; b < kBlocksPerSequence; ++b)
        tables[g].push_back((index * groups + g) * kBlocksPerSequence + b);
  }
};

struct Runners {
  std::shared_ptr<const Checkpoint> checkpoint;
  CpuRunner single;
  TensorParallelCpuRunner parallel;
  int groups;
  Runners(const Case& c)
      : checkpoint(Checkpoint::open(testing::tiny_model(model_for(c)))),
        single(checkpoint, 2),
        parallel(checkpoint, {c.ranks, c.expert_parallel}, 2),
        groups(kv_groups_of(checkpoint->config()).num_groups()) {
    const KvCacheLayout layout{kBlockSize, 4 * groups * kBlocksPerSequence};
    single.allocate_kv_cache(layout);
    parallel.allocate_kv_cache(layout);
  }
};

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, LogitsMatchOneRankWithinRounding) {
  Runners r(GetParam());
  const int vocab = r.checkpoint->config().vocab_size;
  ASSERT_LT(r.checkpoint->config().sliding_window, 40);
  std::vector<int32_t> prompt_a(45), prompt_b(19);
  std::iota(prompt_a.begin(), prompt_a.end(), 1000);
  std::iota(prompt_b.begin(), prompt_b.end(), 70000);
  Sequence a(r.groups, 0), b(r.groups, 1);

  ForwardBatch prefill;
  prefill.sequences.push_back(testing::sequence_step(prompt_a, 0, a.tables, 3));
  prefill.sequences.push_back(testing::sequence_step(prompt_b, 0, b.tables, 1));
  prefill.capture_layers = {0, 3};
  const ForwardOutput one = testing::run_step(r.single, prefill), many = testing::run_step(r.parallel, prefill);
  testing::expect_split_logits_close(one.logits, many.logits, "prefill");
  ASSERT_EQ(one.logits.size(), 4u * vocab);
  ASSERT_EQ(many.captured.size(), 2u);
  testing::expect_split_logits_close(one.captured[1], many.captured[1], "residual after the last layer");

  // Decode steps of both sequences, then a tree step on the first and its accepted path committed.
  std::vector<int32_t> next_a{5}, next_b{6};
  for (int step = 0; step < 3; ++step) {
    ForwardBatch decode;
    decode.sequences.push_back(testing::sequence_step(next_a, 45 + step, a.tables, 1));
    decode.sequences.push_back(testing::sequence_step(next_b, 19 + step, b.tables, 1));
    testing::expect_split_logits_close(testing::run_step(r.single, decode).logits, testing::run_step(r.parallel, decode).logits, "decode " + std::to_string(step));
  }
  const std::vector<int32_t> tree_tokens{7, 11, 12, 13, 14};
  const std::vector<int32_t> parent{-1, 0, 0, 1, 1};
  ForwardBatch tree;
  tree.sequences.push_back(testing::sequence_step(tree_tokens, 48, a.tables, 5));
  tree.sequences[0].tree_parent = parent;
  testing::expect_split_logits_close(testing::run_step(r.single, tree).logits, testing::run_step(r.parallel, tree).logits, "tree step");
  std::vector<std::span<const int32_t>> tables(a.tables.begin(), a.tables.end());
  const std::vector<KvSlotMove> moves{{48 + 1, 49}, {48 + 3, 50}};
  r.single.move_kv_slots(tables, moves);
  r.parallel.move_kv_slots(tables, moves);
  std::vector<int32_t> after{21};
  ForwardBatch next;
  next.sequences.push_back(testing::sequence_step(after, 51, a.tables, 1));
  testing::expect_split_logits_close(testing::run_step(r.single, next).logits, testing::run_step(r.parallel, next).logits, "after the committed path");
}

TEST_P(TensorParallel, GreedyContinuationsEqualWithoutGatheringLogits) {
  Runners r(GetParam());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<int32_t> prompt(30);
  std::iota(prompt.begin(), prompt.end(), 2000);
  Sequence s(r.groups, 0);
  auto continuation = [&](ModelRunner& runner) {
    std::vector<int32_t> context = prompt, out;
    int32_t start = 0;
    for (int i = 0; i < 16; ++i) {
      const std::span<const int32_t> fresh = std::span(context).subspan(start);
      ForwardBatch batch;
      batch.return_logits = false;
      batch.sequences.push_back(testing::sequence_step(fresh, start, s.tables, 1));
      batch.sequences[0].sampling = &greedy;
      const ForwardOutput o = testing::run_step(runner, batch);
      EXPECT_TRUE(o.logits.empty());
      start = static_cast<int32_t>(context.size());
      context.push_back(o.sampled.at(0));
      out.push_back(o.sampled.at(0));
    }
    return out;
  };
  EXPECT_EQ(continuation(r.single), continuation(r.parallel));
}

TEST_P(TensorParallel, LogprobsAndSeededSamplingGoThroughWholeRows) {
  Runners r(GetParam());
  SamplingParams seeded;
  seeded.temperature = 0.8f;
  seeded.seed = 7;
  std::vector<int32_t> prompt(12);
  std::iota(prompt.begin(), prompt.end(), 300);
  Sequence s(r.groups, 0);
  ForwardBatch batch;
  batch.return_logits = false;
  batch.sequences.push_back(testing::sequence_step(prompt, 0, s.tables, 1));
  batch.sequences[0].sampling = &seeded;
  batch.sequences[0].top_logprobs = 5;
  const ForwardOutput one = testing::run_step(r.single, batch), many = testing::run_step(r.parallel, batch);
  ASSERT_EQ(many.logprobs.size(), 1u);
  EXPECT_EQ(one.sampled, many.sampled);
  ASSERT_EQ(one.logprobs[0].top.size(), many.logprobs[0].top.size());
  for (size_t k = 0; k < one.logprobs[0].top.size(); ++k) {
    EXPECT_EQ(one.logprobs[0].top[k].token, many.logprobs[0].top[k].token);
    EXPECT_NEAR(one.logprobs[0].top[k].logprob, many.logprobs[0].top[k].logprob, 1e-4);
  }
}

TEST_P(TensorParallel, ABadStepFailsAndTheRunnerGoesOn) {
  Runners r(GetParam());
  Sequence s(r.groups, 0);
  const std::vector<int32_t> bad{1, r.checkpoint->config().vocab_size + 5};
  ForwardBatch batch;
  batch.sequences.push_back(testing::sequence_step(bad, 0, s.tables, 1));
  ForwardOutput out;
  try {
    r.parallel.forward(batch, out);
    FAIL() << "a token outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(r.checkpoint->config().vocab_size + 5)), std::string::npos)
        << e.what();
  }
  const std::vector<int32_t> good{1, 2, 3};
  ForwardBatch fine;
  fine.sequences.push_back(testing::sequence_step(good, 0, s.tables, 1));
  testing::expect_split_logits_close(testing::run_step(r.single, fine).logits, testing::run_step(r.parallel, fine).logits, "after the failed step");
}

TEST_P(TensorParallel, KvBlocksHoldEveryRanksSlice) {
  Runners r(GetParam());
  EXPECT_EQ(r.parallel.kv_block_bytes(16), r.single.kv_block_bytes(16));
}

INSTANTIATE_TEST_SUITE_P(
    Splits, TensorParallel,
    ::testing::Values(Case{"tp2", 2, false, ExpertFormat::mxfp4, 128}, Case{"tp4", 4, false, ExpertFormat::mxfp4, 128},
                      Case{"tp3_uneven", 3, false, ExpertFormat::mxfp4, 128},
                      Case{"tp2_dense", 2, false, ExpertFormat::dense, 96},
                      Case{"ep2", 2, true, ExpertFormat::mxfp4, 64}, Case{"ep4", 4, true, ExpertFormat::mxfp4, 64},
                      Case{"ep3_dense", 3, true, ExpertFormat::dense, 64}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace moeserve
