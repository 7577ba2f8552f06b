// The slo policy's step budget (scheduler.h): a request's mean TPOT projected to the length it is expected to end
// with, against the rule of banked time. The engine runs over the KV-checking fake runner on a virtual clock
// (simulated_time_runner.h), so every time below follows from the step-cost model.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine_core.h"
#include "engine/fake_runner.h"
#include "engine/simulated_time_runner.h"

namespace moeserve {
namespace {

// A GPU-like step: 13 ms, 0.1 ms per decoding sequence, 40 us per prefill token (a 5,000-token prompt: 200 ms);
// MLPerf gpt-oss-120b Interactive's TPOT target, 15 ms (13.5 ms with the headroom of 0.9).
const StepCost kCost{0.013, 0.0001, 0.00004};
constexpr double kTpotTarget = 0.015, kHeadroom = 0.9;
// The fake runner's vocabulary is 1,000 tokens: this stop token never comes, but a request that has it may stop
// early as far as the scheduler knows.
constexpr int32_t kUnreachableStop = 1000;

double seconds(TimePoint from, TimePoint to) { return std::chrono::duration<double>(to - from).count(); }

struct Stream {
  TimePoint first{}, last{};
  int tokens = 0;
};

// An engine with the slo policy at the Interactive targets, on a virtual clock; every request's stream is kept.
struct SloEngine {
  explicit SloEngine(int expected_output_tokens = 0)
      : runner(fake, kCost, clock), core(runner, config(expected_output_tokens), [this] { return clock; }) {}

  static EngineConfig config(int expected_output_tokens) {
    EngineConfig c = testing::simulated_config(kCost, SchedulingPolicy::slo, 2.0, kTpotTarget, 8192);
    c.scheduler.tpot_headroom = kHeadroom;
    c.scheduler.expected_output_tokens = expected_output_tokens;
    return c;
  }

  void add(uint64_t id, int prompt, int max_tokens, bool may_stop) {
    RequestSpec spec;
    for (int i = 0; i < prompt; ++i) spec.prompt.push_back((static_cast<int>(id) * 131 + i * 7) % 1000);
    spec.max_tokens = max_tokens;
    spec.sampling.temperature = 0;
    if (may_stop) spec.stop_tokens = {kUnreachableStop};
    core.add_request(id, std::move(spec), [this](const RequestEvent& e) {
      Stream& s = streams[e.request_id];
      if (s.tokens == 0 && !e.tokens.empty()) s.first = e.time;
      s.tokens += static_cast<int>(e.tokens.size());
      s.last = e.time;
    });
  }
  // Runs one step; returns its prefill tokens.
  int step() {
    core.step();
    return runner.steps.back().second;
  }
  void run_to_end() {
    while (core.has_work()) core.step();
  }
  double tpot(uint64_t id) const {  // LoadGen: (latency - TTFT) / (tokens - 1)
    const Stream& s = streams.at(id);
    return seconds(s.first, s.last) / (s.tokens - 1);
  }

  TimePoint clock{};
  testing::CheckingFakeRunner fake;
  testing::SimulatedTimeRunner runner;
  std::map<uint64_t, Stream> streams;  // before the engine, whose callbacks write here
  EngineCore core;
};

// Right after its first token a request has banked nothing: the rule of banked time gives a step 13.5 - 13.1 ms
// beyond its decode, 10 prefill tokens (min_prefill_tokens, 16). Projected over 2,000 tokens that each bank
// 0.3-0.4 ms, its mean holds with a 200 ms step now, so the whole prompt goes in at once.
TEST(SloBudget, AYoungRequestWithALongOutputLetsAWholePromptIn) {
  struct Case {
    const char* what;
    bool may_stop;
    int expected_output_tokens;
    int prefill;
  };
  for (const Case& c : {Case{"runs to max_tokens", false, 0, 5000}, Case{"told its length", true, 2000, 5000},
                        Case{"length unknown", true, 0, 16}}) {
    SloEngine e(c.expected_output_tokens);
    e.add(0, 8, 2000, c.may_stop);
    e.step();  // its prefill and first token
    e.add(1, 5000, 100, false);
    EXPECT_EQ(e.step(), c.prefill) << c.what;
    e.run_to_end();
    EXPECT_EQ(e.streams.at(0).tokens, 2000) << c.what;
    EXPECT_LE(e.tpot(0), kHeadroom * kTpotTarget) << c.what;
  }
}

// Beside the young request, one 35 tokens into its 40 has ~11 ms to spare: the step that follows the prompt's
// arrival takes what that leaves (projected, its mean is then right at 13.5 ms), not the whole prompt.
TEST(SloBudget, ARequestNearItsEndWithLittleSlackStillBoundsTheStep) {
  SloEngine e;
  e.add(0, 8, 40, false);
  e.add(1, 8, 2000, false);
  while (e.streams[0].tokens < 35) e.step();
  e.add(2, 5000, 100, false);
  const int prefill = e.step();
  EXPECT_GE(prefill, 16);
  EXPECT_LT(prefill, 1000);
  // Its mean if every later step is decode-only with all three decoding.
  const Stream& near_end = e.streams.at(0);
  const double projected =
      (seconds(near_end.first, near_end.last) + (40 - near_end.tokens) * kCost.predict(3, 0)) / (40 - 1);
  EXPECT_LE(projected, kHeadroom * kTpotTarget);
  EXPECT_GT(projected, kHeadroom * kTpotTarget - kCost.per_prefill_token_seconds);  // it was the bound
  e.run_to_end();
  EXPECT_LE(e.tpot(0), kTpotTarget);
}

// A request that may stop at any token, before any request has finished to learn lengths from: its next token may
// be its last, so a step may spend only what it has banked, n x headroom x target - d, as before the projection.
TEST(SloBudget, WithoutAnExpectedLengthTheStepSpendsOnlyBankedTime) {
  SloEngine e;
  e.add(0, 8, 2000, true);
  for (int i = 0; i < 21; ++i) e.step();
  e.add(1, 5000, 100, false);
  const TimePoint now = e.clock;
  const Stream& banked = e.streams.at(0);
  const double allowed = kHeadroom * kTpotTarget * banked.tokens - seconds(banked.first, now);
  const int expected =
      std::max(16, static_cast<int>((allowed - kCost.predict(1, 0)) / kCost.per_prefill_token_seconds));
  EXPECT_GT(expected, 100);  // 20 decode steps banked 0.4 ms each
  EXPECT_EQ(e.step(), expected);
}

// A length learnt from finished requests that could have stopped: after one ended at 1,000 tokens, a request with
// the same stop token is expected to reach 1,000 too (300 ms of slack) and lets the prompt in whole; before, it
// could not (above).
TEST(SloBudget, LengthsLearntFromFinishedRequestsProjectThoseThatMayStop) {
  SloEngine e;
  e.add(0, 8, 1000, true);
  e.run_to_end();
  e.add(1, 8, 2000, true);
  e.step();
  e.add(2, 5000, 100, false);
  EXPECT_EQ(e.step(), 5000);
}

}  // namespace
}  // namespace moeserve
