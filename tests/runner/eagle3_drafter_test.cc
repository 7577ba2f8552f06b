// The EAGLE-3 drafter against a plain re-computation (eagle3_reference.h) on fresh random features, and its
// mechanics: chains, rollback, trees, batching, KV that does not outlive a call.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "model/eagle3_fixture.h"
#include "runner/cpu/eagle3_drafter.h"
#include "runner/eagle3_reference.h"
#include "runner/eagle3_tree.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::speculative {
namespace {

using testing::draft_options;
using testing::ReferenceDraft;
using testing::tiny_draft_dir;
using testing::tiny_target;

// Log-probabilities from fp32 kernels against the double re-computation: both see the same weights; the gap is
// fp32 rounding through one layer and a 128-way softmax.
constexpr double kTolerance = 2e-4;

// A sequence's verified history: target features for positions [0, n) and the tokens at positions [0, n].
struct History {
  int64_t width = 0;
  std::vector<float> features;
  std::vector<int32_t> tokens;
};

History random_history(int n, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> token(0, 511);
  History h{width, {}, {}};
  for (int64_t i = 0; i < n * width; ++i) h.features.push_back(normal(rng));
  for (int i = 0; i <= n; ++i) h.tokens.push_back(token(rng));
  return h;
}

// The call that brings positions [start, end) of `h`.
DraftInput input(const History& h, uint64_t id, int start, int end, DraftShape shape) {
  DraftInput in;
  in.sequence_id = id;
  in.start_position = start;
  in.features = std::span(h.features).subspan(start * h.width, (end - start) * h.width);
  in.next_tokens = std::span(h.tokens).subspan(start + 1, end - start);
  in.shape = shape;
  return in;
}

DraftShape chain(int k) { return {k, 1, 0}; }
DraftShape tree(int depth, int top_k, int total) { return {depth, top_k, total}; }

struct Fixture {
  std::shared_ptr<const Eagle3Checkpoint> draft;
  std::unique_ptr<Eagle3Drafter> drafter;
  int64_t width() const { return draft->config().feature_width(); }
};

Fixture make_from(const std::string& dir, int64_t blocks = 64) {
  Fixture f;
  f.draft = Eagle3Checkpoint::open(dir, tiny_target()->config());
  f.drafter = std::make_unique<Eagle3Drafter>(f.draft, Eagle3Target::of(tiny_target()),
                                              Eagle3DrafterOptions{16, blocks, 2});
  return f;
}

Fixture make(const TinyEagle3Options& options = draft_options(), int64_t blocks = 64) {
  return make_from(tiny_draft_dir(options), blocks);
}

struct Proposal {
  DraftTree tree;
  std::vector<float> scores;
};

std::vector<Proposal> propose(Eagle3Drafter& drafter, const std::vector<DraftInput>& inputs) {
  std::vector<DraftTree> trees;
  std::vector<std::vector<float>> scores;
  drafter.propose_scored(inputs, trees, &scores);
  std::vector<Proposal> out;
  for (size_t i = 0; i < trees.size(); ++i) out.push_back({trees[i], scores[i]});
  return out;
}

// The reference over a history's first n positions: the prefix KV and the last row's output.
struct ReferencePrefix {
  std::vector<ReferenceDraft::Kv> cache;
  std::vector<double> h2;
};
ReferencePrefix reference_prefix(const ReferenceDraft& ref, const History& h, int n) {
  ReferencePrefix p;
  for (int pos = 0; pos < n; ++pos)
    p.h2 = ref.layer(ref.fuse(h.features.data() + pos * h.width), h.tokens[pos + 1], pos, p.cache);
  return p;
}

// Cumulative log-probability of a path of target tokens below the root at position n, run one step at a time:
// depth t is fed at position n + t - 1 and attends to the prefix and its own ancestors only.
double reference_path_score(const ReferenceDraft& ref, const ReferencePrefix& prefix, int n,
                            const std::vector<int32_t>& path) {
  std::vector<ReferenceDraft::Kv> cache = prefix.cache;
  std::vector<double> h = prefix.h2;
  double score = 0;
  for (size_t d = 0; d < path.size(); ++d) {
    const int draft_id = ref.to_draft(path[d]);
    EXPECT_GE(draft_id, 0) << "token " << path[d] << " is not in the draft vocabulary";
    score += ref.log_probs(h)[draft_id];
    if (d + 1 < path.size()) h = ref.layer(h, path[d], n + static_cast<int>(d), cache);
  }
  return score;
}

std::vector<int32_t> path_to(const DraftTree& tree, int node) {
  std::vector<int32_t> path;
  for (int i = node; i >= 0; i = tree.parent[i]) path.insert(path.begin(), tree.tokens[i]);
  return path;
}

void expect_same(const Proposal& a, const Proposal& b) {
  EXPECT_EQ(a.tree.tokens, b.tree.tokens);
  EXPECT_EQ(a.tree.parent, b.tree.parent);
  EXPECT_EQ(a.scores, b.scores);  // bitwise: a row's arithmetic does not depend on its batch
}

TEST(Eagle3Drafter, EveryTreeNodeMatchesAPlainRecomputation) {
  // The tiny head; the layers.0.* naming with norm_before_fc; a full-vocabulary f32 head sharing the target's
  // unembedding, with its own embeddings and norm_before_residual.
  for (const std::string& dir : {tiny_draft_dir(draft_options("midlayer")),
                                 tiny_draft_dir(draft_options("layers", true)), testing::full_vocab_head_dir()}) {
    Fixture f = make_from(dir);
    const ReferenceDraft ref(*f.draft, tiny_target()->weights());
    const History a = random_history(21, f.width(), 1), b = random_history(9, f.width(), 2);
    auto out = propose(*f.drafter, {input(a, 7, 0, 21, tree(3, 3, 0)), input(b, 8, 0, 9, tree(3, 3, 0))});
    for (auto [history, proposal, n] : {std::tuple{&a, &out[0], 21}, std::tuple{&b, &out[1], 9}}) {
      ASSERT_EQ(proposal->tree.size(), 3u + 9u + 9u);  // 3 children of the root; 3 expanded per later depth
      const ReferencePrefix prefix = reference_prefix(ref, *history, n);
      for (size_t i = 0; i < proposal->tree.size(); ++i)
        EXPECT_NEAR(proposal->scores[i], reference_path_score(ref, prefix, n, path_to(proposal->tree, i)),
                    kTolerance)
            << "node " << i;
    }
  }
}

TEST(Eagle3Drafter, ChainEqualsTheStepsRunOneByOne) {
  Fixture f = make();
  const ReferenceDraft ref(*f.draft, tiny_target()->weights());
  const History h = random_history(30, f.width(), 3);
  const int k = 6;
  auto out = propose(*f.drafter, {input(h, 1, 0, 30, chain(k))});
  ASSERT_EQ(out[0].tree.size(), static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) EXPECT_EQ(out[0].tree.parent[i], i - 1);
  // The reference drafts greedily itself: argmax (lowest draft id on ties), feed back h2 and the token.
  ReferencePrefix prefix = reference_prefix(ref, h, 30);
  std::vector<double> hidden = prefix.h2;
  double score = 0;
  for (int d = 0; d < k; ++d) {
    const std::vector<double> lp = ref.log_probs(hidden);
    const int best = static_cast<int>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    score += lp[best];
    EXPECT_EQ(out[0].tree.tokens[d], ref.to_target(best)) << "depth " << d + 1;
    EXPECT_NEAR(out[0].scores[d], score, kTolerance) << "depth " << d + 1;
    hidden = ref.layer(hidden, ref.to_target(best), 30 + d, prefix.cache);
  }
}

TEST(Eagle3Drafter, RollbackEqualsAFreshDrafterFedTheSameHistory) {
  Fixture used = make(), fresh = make();
  const History h = random_history(40, used.width(), 4);
  // Verified positions arrive in pieces; then the target rolls back to position 13 and brings a different
  // continuation (another history from there on).
  History other = random_history(40, used.width(), 5);
  std::copy_n(h.features.begin(), 13 * h.width, other.features.begin());
  std::copy_n(h.tokens.begin(), 14, other.tokens.begin());
  propose(*used.drafter, {input(h, 3, 0, 10, chain(3))});
  propose(*used.drafter, {input(h, 3, 10, 25, tree(4, 3, 12))});
  EXPECT_EQ(used.drafter->cached_positions(3), 25);
  auto rolled = propose(*used.drafter, {input(other, 3, 13, 20, chain(5))});
  EXPECT_EQ(used.drafter->cached_positions(3), 20);
  propose(*fresh.drafter, {input(other, 3, 0, 13, chain(0))});
  auto direct = propose(*fresh.drafter, {input(other, 3, 13, 20, chain(5))});
  expect_same(rolled[0], direct[0]);
  auto again = propose(*fresh.drafter, {input(other, 3, 20, 20, chain(0))});
  EXPECT_EQ(again[0].tree.size(), 0u);
  EXPECT_EQ(fresh.drafter->cached_positions(3), 20);
}

TEST(Eagle3Drafter, ASequenceDraftsTheSameInAnyBatch) {
  Fixture f = make();
  const History a = random_history(17, f.width(), 6), b = random_history(33, f.width(), 7);
  auto together = propose(*f.drafter, {input(a, 1, 0, 17, tree(3, 2, 5)), input(b, 2, 0, 33, chain(4))});
  Fixture g = make();
  auto alone_b = propose(*g.drafter, {input(b, 2, 0, 33, chain(4))});
  auto alone_a = propose(*g.drafter, {input(a, 1, 0, 17, tree(3, 2, 5))});
  expect_same(together[0], alone_a[0]);
  expect_same(together[1], alone_b[0]);
}

TEST(Eagle3Drafter, ChainIsTheTreeWithTopK1) {
  Fixture f = make();
  const History h = random_history(12, f.width(), 8);
  auto c = propose(*f.drafter, {input(h, 1, 0, 12, chain(5))});
  auto t = propose(*f.drafter, {input(h, 1, 0, 12, tree(5, 1, 5))});
  expect_same(c[0], t[0]);
}

TEST(Eagle3Drafter, TreesAreOrderedBudgetedAndContainTheChain) {
  Fixture f = make();
  for (uint32_t seed = 10; seed < 16; ++seed) {
    const History h = random_history(15, f.width(), seed);
    auto c = propose(*f.drafter, {input(h, 1, 0, 15, chain(4))});
    auto t = propose(*f.drafter, {input(h, 1, 0, 15, tree(4, 4, 10))});
    const DraftTree& tree = t[0].tree;
    ASSERT_EQ(tree.size(), 10u);
    std::vector<int> depth(tree.size());
    for (size_t i = 0; i < tree.size(); ++i) {
      ASSERT_LT(tree.parent[i], static_cast<int>(i)) << "parents come before their children";
      depth[i] = tree.parent[i] < 0 ? 1 : depth[tree.parent[i]] + 1;
      if (i > 0) {
        EXPECT_GE(depth[i], depth[i - 1]);
        // Siblings in ranked order: the same parent, so cumulative scores fall.
        if (tree.parent[i] == tree.parent[i - 1]) {
          EXPECT_LE(t[0].scores[i], t[0].scores[i - 1]);
        }
      }
      EXPECT_LE(depth[i], 4);
    }
    // The best path (first child at each depth) is the chain as far as the tree holds it.
    int node = -1;
    for (int d = 0; d < 4; ++d) {
      int first = -1;
      for (size_t i = 0; i < tree.size() && first < 0; ++i)
        if (tree.parent[i] == node) first = static_cast<int>(i);
      if (first < 0) break;
      EXPECT_EQ(tree.tokens[first], c[0].tree.tokens[d]) << "seed " << seed << " depth " << d + 1;
      EXPECT_EQ(t[0].scores[first], c[0].scores[d]);
      node = first;
    }
  }
}

TEST(Eagle3Drafter, SpeculativeKvDoesNotSurviveTheCall) {
  Fixture f = make(draft_options(), 64);
  const int64_t all = f.drafter->free_blocks();
  const History h = random_history(20, f.width(), 20);
  propose(*f.drafter, {input(h, 5, 0, 20, tree(6, 4, 30))});
  EXPECT_EQ(f.drafter->cached_positions(5), 20);
  EXPECT_EQ(f.drafter->free_blocks(), all - 2);  // 20 positions in blocks of 16
  f.drafter->release(5);
  EXPECT_EQ(f.drafter->free_blocks(), all);
  EXPECT_EQ(f.drafter->cached_positions(5), 0);
}

TEST(Eagle3Drafter, BadCallsAreErrors) {
  Fixture f = make(draft_options(), 2);
  const History h = random_history(40, f.width(), 21);
  auto fails = [&](const std::vector<DraftInput>& inputs, const std::string& part) {
    try {
      propose(*f.drafter, inputs);
      ADD_FAILURE() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  fails({input(h, 1, 5, 9, chain(2))}, "from position 5, but the drafter holds positions [0, 0)");
  DraftInput short_features = input(h, 1, 0, 4, chain(2));
  short_features.features = short_features.features.subspan(1);
  fails({short_features}, "feature floats for 4 tokens");
  fails({input(h, 1, 0, 4, chain(1)), input(h, 1, 0, 4, chain(1))}, "sequence 1 twice");
  fails({input(h, 1, 0, 40, chain(1))}, "KV pool of 2 blocks is full");
}

TEST(Eagle3Drafter, TreeSearchRanksAsEagle) {
  // Vocabulary 4, top_k 2, depth 2, 3 nodes kept. Root: ids 2 (0.5) and 0 (0.3, ties with 3: the lower id).
  const float l5 = std::log(0.5f), l3 = std::log(0.3f), l2 = std::log(0.2f), l1 = std::log(0.1f);
  const std::vector<float> root = {l3, l1, l5, l3};
  DraftTreeSearch search({2, 2, 3}, root);
  ASSERT_EQ(search.frontier(), (std::vector<int>{0, 1}));
  // Under id 2: children 1 (0.5) and 3 (0.3); under id 0: 3 (0.8), 1 (0.1).
  std::vector<float> next = {l2, l5, l1, l3, std::log(0.05f), l1, std::log(0.05f), std::log(0.8f)};
  search.expand(next);
  EXPECT_TRUE(search.frontier().empty());
  std::vector<float> scores;
  DraftTree tree = search.result([](int32_t id) { return id + 100; }, &scores);
  // Scores: 2: .5, 0: .3, 2>1: .25, 2>3: .15, 0>3: .24, 0>1: .03. Best three: 2, 0, 2>1.
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{102, 100, 101}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0}));
  EXPECT_NEAR(scores[2], std::log(0.25), 1e-6);
}

TEST(Eagle3Drafter, TinyDraftIsByteIdentical) {
  for (const auto& options : {draft_options("midlayer"), draft_options("layers", true)}) {
    const std::string a = moeserve::testing::temp_dir("eagle3-a"), b = moeserve::testing::temp_dir("eagle3-b");
    const std::string target = moeserve::testing::tiny_model(testing::tiny_target_options());
    make_tiny_eagle3(options, target, a);
    make_tiny_eagle3(options, target, b);
    for (const char* file : {"config.json", "model.safetensors"})
      EXPECT_EQ(sha256_file(a + "/" + file), sha256_file(b + "/" + file)) << file;
  }
}

}  // namespace
}  // namespace moeserve::speculative
