// Greedy verification from the runner's per-row greedy tokens (verify_draft_greedy, what the engine uses so that
// a verify step copies back ids instead of logits) gives the same verdict as verification from the logits, over
// random chains and trees whose tokens are often the rows' argmax, with and without the forced-acceptance switch.
#include <gtest/gtest.h>

#include <random>

#include "engine/speculative/verifier.h"
#include "sampling/sampler.h"

namespace moeserve::speculative {
namespace {

TEST(Verifier, GreedyTokensGiveTheVerdictOfTheLogits) {
  constexpr int64_t kVocab = 50;
  std::mt19937 rng(2026);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  int accepted_some = 0, rejected_some = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // A random tree: node i's parent is any earlier node or the root.
    DraftTree draft;
    const int nodes = std::uniform_int_distribution<int>(1, 12)(rng);
    const bool chain = trial % 2 == 0;
    for (int i = 0; i < nodes; ++i)
      draft.parent.push_back(chain ? i - 1 : std::uniform_int_distribution<int>(-1, i - 1)(rng));
    std::vector<float> logits((nodes + 1) * kVocab);
    std::normal_distribution<float> normal;
    for (float& x : logits) x = normal(rng);
    std::vector<int32_t> row_tokens(nodes + 1);
    for (int r = 0; r <= nodes; ++r) row_tokens[r] = argmax(std::span(logits).subspan(r * kVocab, kVocab));
    // Each node's token is its parent row's argmax three times in four, so paths get accepted.
    for (int i = 0; i < nodes; ++i) {
      const int parent_row = draft.parent[i] + 1;
      draft.tokens.push_back(std::uniform_int_distribution<int>(0, 3)(rng) > 0
                                 ? row_tokens[parent_row]
                                 : std::uniform_int_distribution<int32_t>(0, kVocab - 1)(rng));
    }
    for (std::optional<double> forced : {std::optional<double>(), std::optional<double>(0.6)}) {
      greedy.seed = static_cast<uint64_t>(trial);
      const Verdict from_logits = verify_draft(draft, logits, kVocab, greedy, 7, forced);
      const Verdict from_tokens = verify_draft_greedy(draft, row_tokens, greedy, 7, forced);
      EXPECT_EQ(from_tokens.path, from_logits.path) << "trial " << trial;
      EXPECT_EQ(from_tokens.tokens, from_logits.tokens) << "trial " << trial;
      ASSERT_EQ(from_logits.tokens.size(), from_logits.path.size() + 1);
      (from_logits.path.empty() ? rejected_some : accepted_some) += 1;
    }
  }
  EXPECT_GT(accepted_some, 100);
  EXPECT_GT(rejected_some, 50);
}

TEST(Verifier, GreedyTokensAreRefusedForSamplingRequestsAndWrongRowCounts) {
  DraftTree draft{{5, 6}, {-1, 0}};
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  EXPECT_THROW(verify_draft_greedy(draft, std::vector<int32_t>{5, 6, 7}, sampled, 0), std::exception);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_THROW(verify_draft_greedy(draft, std::vector<int32_t>{5, 6}, greedy, 0), std::exception);
  const Verdict v = verify_draft_greedy(draft, std::vector<int32_t>{5, 6, 9}, greedy, 0);
  EXPECT_EQ(v.path, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{5, 6, 9}));
}

}  // namespace
}  // namespace moeserve::speculative
