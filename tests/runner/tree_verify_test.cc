// Tree verification in the CPU runner: every node of a draft tree, verified in one step with tree_parent, gets the
// same logits and captured residual streams, bit for bit, as its root-to-node path run alone as a causal chain;
// after move_kv_slots commits an accepted path, the next token matches the causal chain's too. The prompt is
// longer than the tiny model's sliding window and the tree crosses block boundaries.
#include <gtest/gtest.h>

#include <numeric>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/sequence_step.h"
#include "test_util.h"

namespace moeserve {
namespace {

constexpr int kBlockSize = 8;

// A sequence in the runner's pool with its own blocks: [first_block, first_block + blocks) in every group.
struct PooledSequence {
  std::vector<std::vector<int32_t>> tables;
  PooledSequence(int groups, int32_t first_block, int32_t blocks) : tables(groups) {
    for (int g = 0; g < groups; ++g)
      for (int32_t b = 0; b < blocks; ++b) tables[g].push_back(first_block + g * blocks + b);
  }
  SequenceStep step(std::span<const int32_t> tokens, int32_t start, int32_t num_logits) const {
    return testing::sequence_step(tokens, start, tables, num_logits);
  }
};

struct StepResult {
  std::vector<float> logits;
  std::vector<std::vector<float>> captured;
};

StepResult run(CpuRunner& runner, SequenceStep step, const std::vector<int>& capture = {}) {
  ForwardBatch batch;
  batch.sequences.push_back(step);
  batch.capture_layers = capture;
  ForwardOutput out;
  runner.forward(batch, out);
  return {out.logits, out.captured};
}

TEST(TreeVerify, EveryNodeMatchesItsPathRunCausallyBitForBit) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner runner(checkpoint, 2);
  const ModelConfig& c = runner.config();
  ASSERT_LT(c.sliding_window, 40);
  const int groups = kv_groups_of(c).num_groups();
  runner.allocate_kv_cache({kBlockSize, 2 * groups * 16});
  const int vocab = c.vocab_size;
  const int64_t H = c.hidden_size;
  const std::vector<int> capture{0, c.num_layers - 1};

  std::vector<int32_t> prompt(45);
  std::iota(prompt.begin(), prompt.end(), 1000);
  const int32_t start = static_cast<int32_t>(prompt.size()) - 1;  // the root is the prompt's last token
  // Root, then nodes: parents in step indices (-1: the cached prefix).
  const std::vector<int32_t> tokens{prompt.back(), 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const std::vector<int32_t> parent{-1, 0, 0, 0, 1, 1, 2, 4, 4, 7, 9};

  PooledSequence tree_seq(groups, 0, 16);
  run(runner, tree_seq.step(std::span(prompt).first(start), 0, 1));
  SequenceStep tree_step = tree_seq.step(tokens, start, static_cast<int32_t>(tokens.size()));
  tree_step.tree_parent = parent;
  const StepResult tree = run(runner, tree_step, capture);

  PooledSequence chain_seq(groups, groups * 16, 16);
  for (size_t node = 0; node < tokens.size(); ++node) {
    std::vector<int32_t> path;
    for (int32_t i = static_cast<int32_t>(node); i >= 0; i = parent[i]) path.insert(path.begin(), tokens[i]);
    std::vector<int32_t> context(prompt.begin(), prompt.begin() + start);
    context.insert(context.end(), path.begin(), path.end());
    const StepResult chain = run(runner, chain_seq.step(context, 0, 1), capture);
    const std::vector<float> tree_row(tree.logits.begin() + node * vocab, tree.logits.begin() + (node + 1) * vocab);
    EXPECT_EQ(tree_row, chain.logits) << "logits of node " << node;
    for (size_t j = 0; j < capture.size(); ++j) {
      const int64_t last = static_cast<int64_t>(context.size()) - 1;
      EXPECT_TRUE(std::equal(tree.captured[j].begin() + node * H, tree.captured[j].begin() + (node + 1) * H,
                             chain.captured[j].begin() + last * H))
          << "layer " << capture[j] << " of node " << node;
    }
  }

  // Commit the path 0 -> 1 -> 4 -> 7 -> 9 -> 10 (steps 1, 4, 7, 9, 10 to positions start + 1..5), then decode one
  // token after it: the same bits as after the causal chain.
  const std::vector<int32_t> accepted{1, 4, 7, 9, 10};
  std::vector<KvSlotMove> moves;
  for (size_t j = 0; j < accepted.size(); ++j)
    moves.push_back({start + accepted[j], start + 1 + static_cast<int32_t>(j)});
  std::vector<std::span<const int32_t>> tables(tree_seq.tables.begin(), tree_seq.tables.end());
  runner.move_kv_slots(tables, moves);
  const std::vector<int32_t> next{42};
  const int32_t next_position = start + 1 + static_cast<int32_t>(accepted.size());
  const StepResult after_tree = run(runner, tree_seq.step(next, next_position, 1));

  std::vector<int32_t> context(prompt.begin(), prompt.begin() + start);
  context.push_back(tokens[0]);
  for (int32_t i : accepted) context.push_back(tokens[i]);
  context.push_back(42);
  const StepResult after_chain = run(runner, chain_seq.step(context, 0, 1));
  EXPECT_EQ(after_tree.logits, after_chain.logits);
}

TEST(TreeVerify, RejectsParentsAfterTheirChildren) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner runner(checkpoint, 1);
  const int groups = kv_groups_of(runner.config()).num_groups();
  runner.allocate_kv_cache({kBlockSize, groups * 2});
  PooledSequence seq(groups, 0, 2);
  const std::vector<int32_t> tokens{1, 2, 3};
  const std::vector<int32_t> parent{-1, 2, 0};
  SequenceStep step = seq.step(tokens, 0, 1);
  step.tree_parent = parent;
  EXPECT_THROW(run(runner, step), std::exception);
}

}  // namespace
}  // namespace moeserve
