// Speculative decoding in the engine on the tiny model: greedy output with speculation equals output without,
// token for token, for chains (k = 1, 3, 7) and trees, in mixed batches (speculating and plain requests, different
// draft shapes) and under preemption; acceptance length k + 1 with an oracle draft and about 1 with a random one;
// one event per verify step; no KV block left in use; stop tokens and max_tokens inside an accepted run.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_harness.h"
#include "engine/speculative/spec_engine_harness.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

using moeserve::testing::Arrival;
using moeserve::testing::run_requests;
using testing::alone;
using testing::chain;
using testing::tree;

// Requests with random prompts (some longer than the sliding window), lengths, arrival steps and draft shapes
// taken in turn from `shapes` (nullopt: the request does not speculate).
std::vector<Arrival> mixed_arrivals(uint32_t seed, int count, const std::vector<std::optional<DraftShape>>& shapes) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 511);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < count; ++i) {
    Arrival a;
    a.step = std::uniform_int_distribution<int>(0, 6)(rng);
    a.spec.prompt.resize(std::uniform_int_distribution<int>(1, 60)(rng));
    for (auto& t : a.spec.prompt) t = id(rng);
    a.spec.max_tokens = std::uniform_int_distribution<int>(1, 40)(rng);
    a.spec.sampling.temperature = 0;
    const auto& shape = shapes[i % shapes.size()];
    a.spec.speculation = shape.value_or(DraftShape{});
    arrivals.push_back(std::move(a));
  }
  return arrivals;
}

void expect_lossless(const EngineConfig& config, const std::vector<Arrival>& arrivals, bool expect_preemption = false) {
  auto runner = testing::target_runner();
  EngineCore core(*runner, config);
  const auto got = run_requests(core, arrivals);
  auto reference = testing::target_runner();
  ASSERT_EQ(got.size(), arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    EXPECT_EQ(got.at(i).tokens, alone(*reference, arrivals[i].spec)) << "request " << i;
    EXPECT_EQ(got.at(i).finish, FinishReason::length) << "request " << i;
  }
  const EngineMetrics m = core.metrics();
  EXPECT_EQ(m.kv_blocks_in_use, 0);
  EXPECT_GT(m.spec_drafts, 0u);
  EXPECT_GT(m.spec_accepted_tokens, 0u);
  EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);  // some rejections: rollback was exercised
  if (expect_preemption) {
    EXPECT_GT(m.preemptions, 0u);
  }
}

TEST(SpecEngine, GreedyChainsMatchPlainDecodingInMixedBatches) {
  for (int k : {1, 3, 7}) {
    SCOPED_TRACE(k);
    expect_lossless(testing::spec_engine_config(testing::oracle_drafter(0.7)),
                    mixed_arrivals(k, 10, {chain(k), std::nullopt, chain(1 + k / 2)}));
  }
}

TEST(SpecEngine, GreedyTreesMatchPlainDecodingInMixedBatches) {
  expect_lossless(testing::spec_engine_config(testing::oracle_drafter(0.7)),
                  mixed_arrivals(11, 12, {tree(4, 3, 10), chain(3), std::nullopt, tree(3, 2, 6)}));
}

// Async scheduling (--async-scheduling) follows a step with speculating sequences synchronously: their drafts are
// verified and proposed on the host before the next step. The mixed batch then gives the same streams and
// drafting as without it.
TEST(SpecEngine, AsyncSchedulingFallsBackToSynchronousStepsAndChangesNothing) {
  auto target = testing::target_runner();
  const auto arrivals = testing::mixed_arrivals(11, 512);
  std::map<uint64_t, moeserve::testing::Collected> results[2];
  EngineMetrics metrics[2];
  for (bool async : {false, true}) {
    EngineConfig config = testing::spec_engine_config(testing::oracle_drafter(0.6));
    config.async_scheduling = async;
    EngineCore core(*target, config);
    results[async] = run_requests(core, arrivals);
    metrics[async] = core.metrics();
  }
  for (const auto& [id, c] : results[0]) {
    EXPECT_EQ(results[1].at(id).tokens, c.tokens) << "request " << id;
    EXPECT_EQ(results[1].at(id).events, c.events) << "request " << id;
  }
  EXPECT_EQ(metrics[1].steps, metrics[0].steps);
  EXPECT_EQ(metrics[1].spec_drafts, metrics[0].spec_drafts);
  EXPECT_EQ(metrics[1].spec_accepted_tokens, metrics[0].spec_accepted_tokens);
  EXPECT_GT(metrics[0].spec_drafts, 0u);
}

TEST(SpecEngine, GreedyOutputSurvivesPreemption) {
  // A pool that cannot hold every request at once: sequences are preempted and recomputed, their drafter state
  // rolled back to where the target restarts.
  expect_lossless(testing::spec_engine_config(testing::oracle_drafter(0.8), 40, 64),
                  mixed_arrivals(21, 10, {tree(4, 2, 8), chain(7), std::nullopt, chain(3)}), true);
}

RequestSpec greedy_request(int max_tokens, DraftShape shape) {
  RequestSpec spec;
  spec.prompt = {5, 17, 300, 42, 9, 100, 7, 8, 250, 3, 77};
  spec.max_tokens = max_tokens;
  spec.sampling.temperature = 0;
  spec.speculation = shape;
  return spec;
}

TEST(SpecEngine, OracleDraftReachesAcceptanceLengthKPlusOne) {
  for (const DraftShape& shape : {chain(1), chain(3), chain(7), tree(5, 3, 15)}) {
    const int k = shape.num_draft_tokens;
    SCOPED_TRACE(k);
    auto runner = testing::target_runner();
    EngineCore core(*runner, testing::spec_engine_config(testing::oracle_drafter(1.0)));
    // After the first token, every verify step has room for a full draft: max_tokens = 1 + 5 (k + 1).
    std::vector<Arrival> arrivals{{0, greedy_request(1 + 5 * (k + 1), shape)}};
    const auto got = run_requests(core, arrivals);
    const EngineMetrics m = core.metrics();
    EXPECT_EQ(m.spec_drafts, 5u);
    EXPECT_DOUBLE_EQ(m.spec_acceptance_length(), k + 1);
    ASSERT_EQ(m.spec_acceptance_rates().size(), static_cast<size_t>(k));
    for (double rate : m.spec_acceptance_rates()) EXPECT_DOUBLE_EQ(rate, 1.0);
    EXPECT_EQ(got.at(0).events, 6);  // the first token, then one event per verify step with k + 1 tokens
    EXPECT_EQ(got.at(0).tokens, alone(*testing::target_runner(), arrivals[0].spec));
    EXPECT_EQ(m.kv_blocks_in_use, 0);
  }
}

TEST(SpecEngine, AcceptanceByPositionIsZeroWhereNothingWasAccepted) {
  // Every position drafted has its rate, 0 when nothing was accepted there: [0, 0, 0], not [].
  for (const DraftShape& shape : {chain(3), tree(3, 2, 6)}) {
    SCOPED_TRACE(shape.num_draft_tokens);
    auto runner = testing::target_runner();
    EngineCore core(*runner, testing::spec_engine_config(testing::oracle_drafter(0.0)));
    run_requests(core, {{0, greedy_request(12, shape)}});
    const EngineMetrics m = core.metrics();
    ASSERT_GT(m.spec_drafts, 0u);
    EXPECT_EQ(m.spec_accepted_tokens, 0u);
    EXPECT_EQ(m.spec_acceptance_rates(), std::vector<double>(3, 0.0));
  }
}

TEST(SpecEngine, RandomDraftHasAcceptanceLengthAboutOne) {
  auto runner = testing::target_runner();
  EngineCore core(*runner, testing::spec_engine_config(std::make_shared<RandomDrafter>(512, 3)));
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 4; ++i) arrivals.push_back({i, greedy_request(30, chain(3 + i))});
  const auto got = run_requests(core, arrivals);
  const EngineMetrics m = core.metrics();
  EXPECT_GT(m.spec_drafts, 50u);
  // A uniform draft over 512 tokens is accepted about 1 time in 512 at each position.
  EXPECT_GE(m.spec_acceptance_length(), 1.0);
  EXPECT_LT(m.spec_acceptance_length(), 1.05);
  for (size_t i = 0; i < arrivals.size(); ++i)
    EXPECT_EQ(got.at(i).tokens, alone(*testing::target_runner(), arrivals[i].spec));
  EXPECT_EQ(m.kv_blocks_in_use, 0);
}

TEST(SpecEngine, StopTokenAndMaxTokensInsideAnAcceptedRun) {
  const std::vector<int32_t> plain = alone(*testing::target_runner(), greedy_request(20, chain(7)));
  // A stop token whose first occurrence is the 4th generated token: inside the first verify step's accepted run.
  size_t stop_at = 3;
  while (std::find(plain.begin(), plain.begin() + stop_at, plain[stop_at]) != plain.begin() + stop_at) ++stop_at;
  RequestSpec stopping = greedy_request(20, chain(7));
  stopping.stop_tokens = {plain[stop_at]};
  // max_tokens ending mid-draft.
  RequestSpec short_one = greedy_request(4, chain(7));
  auto runner = testing::target_runner();
  EngineCore core(*runner, testing::spec_engine_config(testing::oracle_drafter(1.0)));
  const auto got = run_requests(core, {{0, stopping}, {0, short_one}});
  EXPECT_EQ(got.at(0).tokens, std::vector<int32_t>(plain.begin(), plain.begin() + stop_at + 1));
  EXPECT_EQ(got.at(0).finish, FinishReason::stop);
  EXPECT_EQ(got.at(1).tokens, std::vector<int32_t>(plain.begin(), plain.begin() + 4));
  EXPECT_EQ(got.at(1).finish, FinishReason::length);
  EXPECT_EQ(core.metrics().kv_blocks_in_use, 0);
}

TEST(SpecEngine, RequestsAskingForSpeculationWithoutADrafterAreRefused) {
  auto runner = testing::target_runner();
  EngineConfig config = testing::spec_engine_config(nullptr);
  EngineCore core(*runner, config);
  EXPECT_THROW(core.validate(greedy_request(4, chain(2))), Error);
  EXPECT_THROW(core.validate(greedy_request(4, tree(2, 2, 0))), Error);
}

}  // namespace
}  // namespace moeserve::speculative
