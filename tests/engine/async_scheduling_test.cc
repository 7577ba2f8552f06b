// Async scheduling (EngineConfig::async_scheduling, vLLM's --async-scheduling) against synchronous steps: the same
// tokens, events and finish reasons for every request, on the tiny model and on the KV-checking fake runner run
// deferred (each step computed when it is collected, as on a GPU), across stop tokens, max_tokens, cancellations
// of requests in flight, preemption, prefix-cache hits and chunked prefill; the same steps and preemptions where
// no request ends in a way the host could not foresee. And the order itself: step N+1 is scheduled between the
// launch and the collection of step N, except after steps that need their tokens on the host first.
#include <gtest/gtest.h>

#include <random>

#include "engine/deferred_runner.h"
#include "engine/engine_harness.h"
#include "engine/fake_runner.h"
#include "engine/stress_scenarios.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"

namespace moeserve {
namespace {

using testing::Arrival;
using testing::Collected;
using testing::DeferredRunner;

struct Outcome {
  std::map<uint64_t, Collected> requests;
  EngineMetrics metrics;
};

// Runs the arrivals on `runner` (deferred when async), cancelling request id after step cancel_at_step[id].
Outcome run(ModelRunner& runner, EngineConfig config, bool async, const std::vector<Arrival>& arrivals,
        const std::map<uint64_t, int>& cancel_at_step = {}) {
  config.async_scheduling = async;
  DeferredRunner deferred(runner);
  EngineCore core(async ? static_cast<ModelRunner&>(deferred) : runner, config);
  Outcome out;
  out.requests = testing::run_requests(core, arrivals, [&](int step) {
    for (auto [id, at] : cancel_at_step)
      if (at == step) core.cancel(id);
  });
  EXPECT_TRUE(core.kv().pool().all_released());
  out.metrics = core.metrics();
  return out;
}

void expect_same_requests(const Outcome& sync, const Outcome& async, const std::string& where) {
  ASSERT_EQ(sync.requests.size(), async.requests.size()) << where;
  for (const auto& [id, want] : sync.requests) {
    const Collected& got = async.requests.at(id);
    EXPECT_EQ(got.tokens, want.tokens) << where << " request " << id;
    EXPECT_EQ(got.finish, want.finish) << where << " request " << id;
    EXPECT_EQ(got.events, want.events) << where << " request " << id;
  }
}

// When a stop token ends a request unforeseen, the steps after differ, and with them how far a request has got
// when it is cancelled at a given step: the shorter of its two streams is a start of the longer.
void expect_same_requests_but_cancelled(const Outcome& sync, const Outcome& async, const std::string& where) {
  ASSERT_EQ(sync.requests.size(), async.requests.size()) << where;
  for (const auto& [id, want] : sync.requests) {
    const Collected& got = async.requests.at(id);
    if (got.finish != FinishReason::cancelled && want.finish != FinishReason::cancelled) {
      EXPECT_EQ(got.tokens, want.tokens) << where << " request " << id;
      EXPECT_EQ(got.finish, want.finish) << where << " request " << id;
      continue;
    }
    const size_t shorter = std::min(got.tokens.size(), want.tokens.size());
    EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.begin() + shorter, want.tokens.begin()))
        << where << " request " << id;
  }
}

// With nothing ending unforeseen (no stop tokens; max_tokens, the context and cancellations are foreseen), the
// scheduler saw the same state at every step.
void expect_same_steps(const Outcome& sync, const Outcome& async, const std::string& where) {
  EXPECT_EQ(async.metrics.steps, sync.metrics.steps) << where;
  EXPECT_EQ(async.metrics.preemptions, sync.metrics.preemptions) << where;
  EXPECT_EQ(async.metrics.prefix_hit_tokens, sync.metrics.prefix_hit_tokens) << where;
  EXPECT_EQ(async.metrics.prompt_tokens_computed, sync.metrics.prompt_tokens_computed) << where;
}

bool has_stop_tokens(const std::vector<Arrival>& arrivals) {
  return std::any_of(arrivals.begin(), arrivals.end(), [](const Arrival& a) { return !a.spec.stop_tokens.empty(); });
}

TEST(AsyncScheduling, StressScenariosGiveWhatSynchronousStepsGive) {
  int exact = 0, preemptions = 0, cancellations = 0, stops = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    testing::Scenario s = testing::random_scenario(seed);
    // The slo policy sizes steps from measured step times, which differ between any two runs.
    s.config.scheduler.policy = SchedulingPolicy::fcfs;
    for (Arrival& a : s.arrivals) a.spec.stop_tokens.clear();
    if (seed % 2 == 1) {
      // Half the requests stop at the token they would give third: ends the host cannot foresee.
      testing::CheckingFakeRunner free_runner;
      const Outcome free_run = run(free_runner, s.config, false, s.arrivals);
      for (const auto& [id, c] : free_run.requests)
        if (id % 2 == 1 && c.tokens.size() >= 3) s.arrivals[id].spec.stop_tokens = {c.tokens[2]};
    }
    const std::string where = "seed " + std::to_string(seed);
    testing::CheckingFakeRunner sync_runner, async_runner;
    const Outcome sync = run(sync_runner, s.config, false, s.arrivals, s.cancel_at_step);
    const Outcome async = run(async_runner, s.config, true, s.arrivals, s.cancel_at_step);
    if (!has_stop_tokens(s.arrivals)) {
      expect_same_requests(sync, async, where);
      expect_same_steps(sync, async, where);
      ++exact;
    } else {
      expect_same_requests_but_cancelled(sync, async, where);
    }
    preemptions += sync.metrics.preemptions;
    for (const auto& [id, c] : sync.requests) {
      cancellations += c.finish == FinishReason::cancelled;
      stops += c.finish == FinishReason::stop;
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(exact, 100);
  EXPECT_GT(preemptions, 200);
  EXPECT_GT(cancellations, 30);
  EXPECT_GT(stops, 200);
}

std::shared_ptr<CpuRunner> tiny_runner() {
  static auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  return std::make_shared<CpuRunner>(checkpoint, 2);
}

// Requests on the tiny model: some share a prompt prefix, greedy and sampled, random lengths and arrivals.
std::vector<Arrival> tiny_arrivals(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<int32_t> shared(40);
  for (auto& t : shared) t = pick(0, 199997);
  std::vector<Arrival> arrivals;
  for (int i = 0; i < count; ++i) {
    Arrival a;
    a.step = pick(0, 8);
    if (i % 3 == 0) a.spec.prompt = shared;
    for (int n = pick(1, 50); n > 0; --n) a.spec.prompt.push_back(pick(0, 199997));
    a.spec.max_tokens = pick(1, 16);
    a.spec.sampling.temperature = i % 2 ? 1.0f : 0.0f;
    a.spec.sampling.seed = 77 + i;
    arrivals.push_back(std::move(a));
  }
  return arrivals;
}

EngineConfig tiny_config(int64_t blocks, int max_batched_tokens) {
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = blocks;
  config.scheduler.max_batched_tokens = max_batched_tokens;
  return config;
}

TEST(AsyncScheduling, TinyModelGivesTheSameStepsAndTokens) {
  auto runner = tiny_runner();
  auto arrivals = tiny_arrivals(3, 12);
  // Chunked prefill (24 tokens a step), prefix-cache hits, and a pool small enough to preempt.
  for (int64_t blocks : {512, 40}) {
    const std::string where = std::to_string(blocks) + " blocks";
    const Outcome sync = run(*runner, tiny_config(blocks, 24), false, arrivals, {{4, 6}, {7, 9}});
    const Outcome async = run(*runner, tiny_config(blocks, 24), true, arrivals, {{4, 6}, {7, 9}});
    expect_same_requests(sync, async, where);
    expect_same_steps(sync, async, where);
    EXPECT_EQ(sync.requests.at(4).finish, FinishReason::cancelled);
    EXPECT_GT(sync.metrics.prefix_hit_tokens, 0) << where;
    if (blocks == 40) {
      EXPECT_GT(sync.metrics.preemptions, 0);
    }
  }
}

TEST(AsyncScheduling, TinyModelStopTokensEndRequestsAsSynchronousStepsDo) {
  auto runner = tiny_runner();
  auto arrivals = tiny_arrivals(5, 10);
  // Each request stops at the token its synchronous run gave third, which ends it where the host could not
  // foresee: step N+1 was scheduled with it.
  const Outcome free_run = run(*runner, tiny_config(512, 32), false, arrivals);
  for (auto& [id, c] : free_run.requests)
    if (c.tokens.size() >= 3) arrivals[id].spec.stop_tokens = {c.tokens[2]};
  for (int64_t blocks : {512, 40}) {
    const Outcome sync = run(*runner, tiny_config(blocks, 32), false, arrivals);
    const Outcome async = run(*runner, tiny_config(blocks, 32), true, arrivals);
    expect_same_requests(sync, async, std::to_string(blocks) + " blocks");
    int stopped = 0;
    for (auto& [id, c] : sync.requests) stopped += c.finish == FinishReason::stop;
    EXPECT_GT(stopped, 3);
  }
}

// Six requests of ten tokens, one arriving before each of the first steps (with a logit_bias when `biased`), on
// the deferred fake runner with async scheduling: the runner's log, how many requests waited at each collection,
// and the streams.
struct Interleaving {
  std::vector<std::string> log;
  std::vector<int> waiting_at_collect;
  std::map<uint64_t, Collected> requests;
  std::vector<Arrival> arrivals;
  EngineConfig config;
};

Interleaving run_interleaved(bool biased) {
  Interleaving out;
  out.config.block_size = 4;
  out.config.num_kv_blocks = 1024;
  for (int i = 0; i < 6; ++i) {
    RequestSpec spec{.prompt = {1, 2, 3, i}, .max_tokens = 10};
    if (biased) spec.processing.logit_bias = {{5, 1.0f}};
    out.arrivals.push_back({i, spec});
  }
  testing::CheckingFakeRunner fake;
  DeferredRunner runner(fake);
  EngineConfig config = out.config;
  config.async_scheduling = true;
  EngineCore core(runner, config);
  runner.before_collect = [&](int) { out.waiting_at_collect.push_back(static_cast<int>(core.metrics().waiting)); };
  out.requests = testing::run_requests(core, out.arrivals);
  out.log = runner.log;
  return out;
}

// At the collection of step N, the request added for step N + 1 has already been admitted (the scheduling of step
// N + 1 ran), and step N + 1 is launched only after that collection.
TEST(AsyncScheduling, TheNextStepIsScheduledWhileTheStepRuns) {
  const Interleaving got = run_interleaved(false);
  ASSERT_GE(got.log.size(), 12u);
  for (int n = 0; n < 6; ++n) {
    const auto collect = std::find(got.log.begin(), got.log.end(), "collect " + std::to_string(n));
    const auto next = std::find(got.log.begin(), got.log.end(), "launch " + std::to_string(n + 1));
    EXPECT_LT(collect - got.log.begin(), next - got.log.begin()) << "step " << n;
  }
  for (int n = 0; n < 5; ++n) EXPECT_EQ(got.waiting_at_collect[n], 0) << "step " << n;
}

// Steps whose next draw depends on their tokens on the host (here logit_bias) are followed synchronously: at the
// collection of step N, the request added for step N + 1 is still waiting. The streams are the synchronous ones.
TEST(AsyncScheduling, LogitsProcessingFallsBackToSynchronousSteps) {
  const Interleaving got = run_interleaved(true);
  for (int n = 0; n < 5; ++n) EXPECT_EQ(got.waiting_at_collect[n], 1) << "step " << n;
  testing::CheckingFakeRunner sync_runner;
  const Outcome sync = run(sync_runner, got.config, false, got.arrivals);
  for (const auto& [id, c] : sync.requests) EXPECT_EQ(got.requests.at(id).tokens, c.tokens) << "request " << id;
}

}  // namespace
}  // namespace moeserve
