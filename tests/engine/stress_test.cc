// Randomised stress of the engine over the KV-checking fake runner: random arrivals, cancellations, tiny KV
// budgets, block sizes, token budgets, policies, with and without prefix caching. Every request must end exactly
// once, with the tokens it would have produced alone (or a prefix of them when cancelled), and every block must
// be back in the pool. CI also runs this under AddressSanitizer and UBSan.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_harness.h"
#include "engine/fake_runner.h"
#include "engine/stress_scenarios.h"

namespace moeserve {
namespace {

using testing::Arrival;
using testing::random_scenario;
using testing::Scenario;

std::vector<int32_t> run_alone(const RequestSpec& spec) {
  testing::CheckingFakeRunner runner;
  EngineConfig config;
  config.block_size = 4;
  config.num_kv_blocks = 4096;
  EngineCore core(runner, config);
  auto got = testing::run_requests(core, {{0, spec}});
  EXPECT_NE(got.at(0).finish, FinishReason::error);
  return got.at(0).tokens;
}

TEST(EngineStress, RandomLoadsKeepEveryTokenAndEveryBlock) {
  int preemptions = 0, cancellations = 0, hits = 0;
  for (uint32_t seed = 1; seed <= 600; ++seed) {
    Scenario s = random_scenario(seed);
    if (std::getenv("MOESERVE_STRESS_VERBOSE")) std::fprintf(stderr, "seed %u\n", seed);
    testing::CheckingFakeRunner runner;
    EngineCore core(runner, s.config);
    auto got = testing::run_requests(core, s.arrivals, [&](int step) {
      for (auto [id, at] : s.cancel_at_step)
        if (at == step) core.cancel(id);
    });
    ASSERT_EQ(got.size(), s.arrivals.size()) << "seed " << seed;
    for (size_t i = 0; i < s.arrivals.size(); ++i) {
      const auto& c = got.at(i);
      ASSERT_NE(c.finish, FinishReason::error) << "seed " << seed << " request " << i;
      ASSERT_NE(c.finish, FinishReason::none) << "seed " << seed << " request " << i;
      const auto reference = run_alone(s.arrivals[i].spec);
      if (c.finish == FinishReason::cancelled) {
        ++cancellations;
        ASSERT_LE(c.tokens.size(), reference.size());
        ASSERT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), reference.begin())) << "seed " << seed;
      } else {
        ASSERT_EQ(c.tokens, reference) << "seed " << seed << " request " << i;
      }
    }
    ASSERT_TRUE(core.kv().pool().all_released()) << "seed " << seed;
    preemptions += core.metrics().preemptions;
    hits += core.metrics().prefix_hit_tokens;
  }
  std::printf("%d preemptions, %d cancellations, %d prefix-cache hit tokens\n", preemptions, cancellations, hits);
  // The scenarios really exercised what they are meant to.
  EXPECT_GT(preemptions, 500);
  EXPECT_GT(cancellations, 100);
  EXPECT_GT(hits, 1000);
}

// An Offline-shaped burst into a pool that holds a fraction of it: with a watermark the running sequences grow
// into the blocks admission left, instead of preempting (and later recomputing) the prompts admitted last.
TEST(EngineWatermark, AnOfflineBurstPreemptsLessAndRecomputesLessWithTheWatermark) {
  std::mt19937 rng(7);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 96; ++i) {
    Arrival a;
    for (int n = std::uniform_int_distribution<int>(80, 120)(rng); n > 0; --n)
      a.spec.prompt.push_back(std::uniform_int_distribution<int>(0, 999)(rng));
    a.spec.max_tokens = std::uniform_int_distribution<int>(150, 250)(rng);
    a.spec.sampling.temperature = 0;
    arrivals.push_back(std::move(a));
  }
  struct Run {
    uint64_t preemptions, prompt_tokens_computed;
    std::map<uint64_t, testing::Collected> got;
  };
  auto run = [&](double watermark) {
    testing::CheckingFakeRunner runner;
    EngineConfig config;
    config.block_size = 4;
    config.num_kv_blocks = 2000;  // ~22 sequences at full length (the full-attention group's 90 blocks each)
    config.scheduler.max_batched_tokens = 512;
    config.scheduler.max_num_seqs = 96;
    config.scheduler.kv_watermark = watermark;
    EngineCore core(runner, config);
    Run r{0, 0, testing::run_requests(core, arrivals)};
    r.preemptions = core.metrics().preemptions;
    r.prompt_tokens_computed = core.metrics().prompt_tokens_computed;
    EXPECT_TRUE(core.kv().pool().all_released());
    return r;
  };
  const Run without = run(0.0), with = run(0.05);
  for (size_t i = 0; i < arrivals.size(); ++i) {
    ASSERT_EQ(with.got.at(i).tokens, without.got.at(i).tokens) << "request " << i;
    ASSERT_EQ(with.got.at(i).finish, FinishReason::length) << "request " << i;
  }
  std::printf("preemptions %llu -> %llu, prompt tokens computed %llu -> %llu\n",
              static_cast<unsigned long long>(without.preemptions), static_cast<unsigned long long>(with.preemptions),
              static_cast<unsigned long long>(without.prompt_tokens_computed),
              static_cast<unsigned long long>(with.prompt_tokens_computed));
  EXPECT_GT(without.preemptions, 10u);  // the burst does run the pool dry without one
  EXPECT_LT(with.preemptions * 4, without.preemptions);
  EXPECT_LT(with.prompt_tokens_computed, without.prompt_tokens_computed);
}

}  // namespace
}  // namespace moeserve
