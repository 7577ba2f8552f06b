// The EAGLE-3 drafter inside the engine: greedy outputs with its chains and trees equal the target's own, token
// for token, in mixed batches (speculating and plain requests), with chunked prefill and under preemption.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_harness.h"
#include "engine/speculative/spec_engine_harness.h"
#include "model/eagle3_fixture.h"
#include "runner/cpu/eagle3_drafter.h"

namespace moeserve::speculative {
namespace {

using moeserve::testing::Arrival;
using moeserve::testing::run_requests;

std::shared_ptr<Drafter> eagle3_drafter(const TinyEagle3Options& options) {
  auto head = std::shared_ptr<const Eagle3Checkpoint>(
      Eagle3Checkpoint::open(testing::tiny_draft_dir(options), testing::small_vocab_target()->config()));
  return std::make_shared<Eagle3Drafter>(head, Eagle3Target::of(testing::small_vocab_target()),
                                         Eagle3DrafterOptions{8, 1024, 2});
}

// Returns the engine's preemption count.
uint64_t expect_lossless(const TinyEagle3Options& options, int64_t kv_blocks) {
  auto runner = testing::target_runner();
  auto reference = testing::target_runner();
  return testing::expect_lossless(*runner, *reference, eagle3_drafter(options), kv_blocks,
                                  testing::mixed_arrivals(11, 512))
      .preemptions;
}

TEST(Eagle3Engine, GreedyOutputsEqualTheTargetsInMixedBatches) {
  expect_lossless(testing::draft_options("midlayer"), 1024);
  expect_lossless(testing::draft_options("layers", true), 1024);
}

TEST(Eagle3Engine, GreedyOutputsEqualTheTargetsUnderPreemption) {
  // 24 blocks of 8 tokens for 10 requests of up to 94 tokens in two KV groups: sequences are preempted and
  // recomputed, and the drafter restarts them from position 0.
  EXPECT_GT(expect_lossless(testing::draft_options("midlayer"), 24), 0u);
}

// Requests sharing a 45-token prefix, the later ones arriving after the first has finished: they hit the target's
// prefix cache and the drafter's (its KV for the prefix is restored, not recomputed), and since the CPU drafter's
// arithmetic does not depend on the batch, every draft and so every acceptance is the same as without caching.
TEST(Eagle3Engine, SharedPrefixesHitTheDraftersCacheWithTheSameDrafts) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, 511);
  std::vector<int32_t> prefix(45);
  for (auto& t : prefix) t = id(rng);
  std::vector<Arrival> requests;
  const std::vector<DraftShape> shapes = {testing::chain(3), testing::tree(3, 2, 5), testing::chain(2)};
  for (int i = 0; i < 6; ++i) {
    Arrival a;
    a.step = i == 0 ? 0 : 40 + i;
    a.spec.prompt = prefix;
    for (int j = 0; j < 3 + i; ++j) a.spec.prompt.push_back(id(rng));
    a.spec.sampling.temperature = 0.0f;
    a.spec.max_tokens = 10;
    a.spec.speculation = shapes[i % shapes.size()];
    requests.push_back(a);
  }
  auto run = [&](bool prefix_caching) {
    auto runner = testing::target_runner();
    EngineConfig config = testing::spec_engine_config(eagle3_drafter(testing::draft_options("midlayer")));
    config.prefix_caching = prefix_caching;
    EngineCore core(*runner, config);
    const auto results = run_requests(core, requests);
    auto reference = testing::target_runner();
    for (size_t i = 0; i < requests.size(); ++i)
      EXPECT_EQ(results.at(i).tokens, testing::alone(*reference, requests[i].spec)) << "request " << i;
    return core.metrics();
  };
  const EngineMetrics cached = run(true), uncached = run(false);
  // Five requests hit 40 tokens each (five blocks of 8; the drafter's fifth block needs token 40, also shared).
  EXPECT_EQ(cached.prefix_hit_tokens, 5u * 40u);
  EXPECT_EQ(uncached.prefix_hit_tokens, 0u);
  EXPECT_GT(cached.spec_drafts, 0u);
  EXPECT_EQ(cached.spec_drafts, uncached.spec_drafts);
  EXPECT_EQ(cached.spec_accepted_tokens, uncached.spec_accepted_tokens);
  EXPECT_EQ(cached.spec_accepted_per_position, uncached.spec_accepted_per_position);
}

}  // namespace
}  // namespace moeserve::speculative
