// The TTFT/TPOT-aware policy in simulated loads, against FCFS and against its own rule of banked time, on the tiny
// model or the KV-checking fake runner. Time is virtual: every step advances the clock by a fixed step-cost model
// (simulated_time_runner.h). The runner computes the real tokens.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_core.h"
#include "engine/fake_runner.h"
#include "engine/simulated_time_runner.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"

namespace moeserve {
namespace {

using testing::SimulatedTimeRunner;

struct LoadResult {
  double p99_tpot = 0;
  double p99_ttft = 0;
  double throughput = 0;  // output tokens per simulated second, first arrival to last finish
  int completed = 0;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

constexpr int kRequests = 60;

std::shared_ptr<const Checkpoint> tiny_checkpoint() {
  static auto checkpoint = [] {
    TinyModelOptions o;
    o.vocab = 512;
    return std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(o)));
  }();
  return checkpoint;
}

// Poisson arrivals, `rate` a second; prompt and output lengths uniform in their ranges, prompt ids below `vocab`.
struct PoissonLoad {
  double rate = 1;
  int requests = 0;
  std::pair<int, int> prompt, output;
  int vocab = 0;
  uint32_t seed = 0;
  std::vector<int32_t> stop_tokens;
};

// One request of a load, timed as LoadGen times it.
struct Served {
  TimePoint arrival{}, first{}, last{};
  int tokens = 0;
  bool done = false;  // ended at max_tokens
  double ttft() const { return std::chrono::duration<double>(first - arrival).count(); }
  // LoadGen: TPOT = (latency - TTFT) / (tokens - 1).
  double tpot() const { return std::chrono::duration<double>(last - first).count() / (tokens - 1); }
};

// Runs `load` through an engine of `config` over `inner`, on a virtual clock that advances by the config's
// step-cost model.
std::vector<Served> serve(ModelRunner& inner, const EngineConfig& config, const PoissonLoad& load) {
  TimePoint clock{};
  SimulatedTimeRunner runner(inner, config.initial_step_cost, clock);
  EngineCore core(runner, config, [&] { return clock; });
  std::mt19937 rng(load.seed);
  std::exponential_distribution<double> gap(load.rate);
  std::uniform_int_distribution<int> prompt_len(load.prompt.first, load.prompt.second),
      out_len(load.output.first, load.output.second), id(0, load.vocab - 1);
  std::vector<RequestSpec> specs;
  std::vector<Served> served(load.requests);
  TimePoint t{};
  for (Served& s : served) {
    t += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    RequestSpec& spec = specs.emplace_back();
    for (int n = prompt_len(rng); n > 0; --n) spec.prompt.push_back(id(rng));
    spec.max_tokens = out_len(rng);
    spec.sampling.temperature = 0;
    spec.stop_tokens = load.stop_tokens;
    spec.arrival = s.arrival = t;
  }
  for (size_t next = 0; next < specs.size() || core.has_work();) {
    for (; next < specs.size() && served[next].arrival <= clock; ++next)
      core.add_request(next, specs[next], [&served](const RequestEvent& e) {
        Served& s = served[e.request_id];
        if (s.tokens == 0 && !e.tokens.empty()) s.first = e.time;
        s.tokens += static_cast<int>(e.tokens.size());
        s.last = e.time;
        s.done = e.finish == FinishReason::length;
      });
    if (core.has_work())
      core.step();
    else
      clock = served[next].arrival;
  }
  return served;
}

LoadResult simulate(SchedulingPolicy policy, const StepCost& cost) {
  CpuRunner cpu(tiny_checkpoint(), 2);
  // Poisson arrivals at 5 requests/s; prompts 200-800 tokens, 16-48 output tokens. Same load for both policies.
  const std::vector<Served> served = serve(cpu, testing::simulated_config(cost, policy, 2.0, 0.060, 2048),
                                          {5.0, kRequests, {200, 800}, {16, 48}, 512, 2024, {}});
  LoadResult r;
  std::vector<double> tpot, ttft;
  int tokens = 0;
  TimePoint last_finish{};
  for (const Served& s : served) {
    r.completed += s.done;
    tokens += s.tokens;
    last_finish = std::max(last_finish, s.last);
    ttft.push_back(s.ttft());
    if (s.tokens > 1) tpot.push_back(s.tpot());
  }
  r.p99_tpot = percentile(tpot, 0.99);
  r.p99_ttft = percentile(ttft, 0.99);
  r.throughput = tokens / std::chrono::duration<double>(last_finish - served.front().arrival).count();
  return r;
}

TEST(SloPolicy, BeatsFcfsOnP99TpotAtEqualThroughput) {
  // A step costs 5 ms, plus 0.5 ms per decoding sequence, plus 0.2 ms per prefill token: a 2048-token FCFS
  // step takes 0.4 s, which every running decode waits for.
  const StepCost cost{0.005, 0.0005, 0.0002};
  LoadResult fcfs = simulate(SchedulingPolicy::fcfs, cost);
  LoadResult slo = simulate(SchedulingPolicy::slo, cost);
  std::printf("fcfs: p99 TPOT %.4f s, p99 TTFT %.3f s, %.1f tok/s; slo: p99 TPOT %.4f s, p99 TTFT %.3f s, "
              "%.1f tok/s\n",
              fcfs.p99_tpot, fcfs.p99_ttft, fcfs.throughput, slo.p99_tpot, slo.p99_ttft, slo.throughput);
  EXPECT_EQ(fcfs.completed, kRequests);
  EXPECT_EQ(slo.completed, kRequests);
  EXPECT_LT(slo.p99_tpot, 0.7 * fcfs.p99_tpot);
  EXPECT_LE(slo.p99_tpot, 0.060);  // the target holds
  EXPECT_NEAR(slo.throughput / fcfs.throughput, 1.0, 0.05);
}

// A burst of long prompts arrives while long requests decode: steps that use the time those requests banked (their
// decode-only steps ran far under the target) prefill far more than one step's worth of the target, and every
// request's mean TPOT still holds.
TEST(SloPolicy, ABurstOfPromptsSpendsTheTpotTheDecodersBanked) {
  CpuRunner cpu(tiny_checkpoint(), 2);
  TimePoint clock{};
  const StepCost cost{0.005, 0.0005, 0.00005};
  SimulatedTimeRunner runner(cpu, cost, clock);
  EngineCore core(runner, testing::simulated_config(cost, SchedulingPolicy::slo, 3.0, 0.060, 4096),
                  [&] { return clock; });
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> id(0, 511);
  struct Seen {
    TimePoint first{}, last{};
    int tokens = 0;
  };
  std::vector<Seen> seen(18);
  auto add = [&](uint64_t i, int prompt, int output) {
    RequestSpec spec;
    for (int n = 0; n < prompt; ++n) spec.prompt.push_back(id(rng));
    spec.max_tokens = output;
    spec.sampling.temperature = 0;
    spec.arrival = clock;
    core.add_request(i, std::move(spec), [&seen](const RequestEvent& e) {
      Seen& s = seen[e.request_id];
      if (s.tokens == 0 && !e.tokens.empty()) s.first = e.time;
      s.tokens += static_cast<int>(e.tokens.size());
      s.last = e.time;
    });
  };
  for (int i = 0; i < 10; ++i) add(i, 32, 120);  // decoders: 10 x 0.5 ms + 5 ms = 10 ms steps, target 60 ms
  for (int i = 0; i < 40; ++i) core.step();
  const size_t burst_from = runner.steps.size();
  for (int i = 10; i < 18; ++i) add(i, 2000, 40);
  while (core.has_work()) core.step();

  // The per-step rule would give a burst step at most (0.9 x 60 ms - 10 ms) / 0.05 ms = 880 prefill tokens.
  int largest = 0;
  for (size_t i = burst_from; i < runner.steps.size(); ++i) largest = std::max(largest, runner.steps[i].second);
  std::printf("largest prefill chunk in the burst: %d tokens\n", largest);
  EXPECT_GE(largest, 2000);
  for (const Seen& s : seen) {
    ASSERT_GT(s.tokens, 1);
    const double tpot = std::chrono::duration<double>(s.last - s.first).count() / (s.tokens - 1);
    EXPECT_LE(tpot, 0.060);
  }
}



// An Interactive-shaped load (MLPerf gpt-oss-120b: TTFT 2 s, TPOT 15 ms) on a GPU-like step: 8.5 ms, 0.2 ms per
// decoding sequence (10-13 ms at 8-22 of them, as on an H200), 72 us per prefill token (a 2,500-token prompt here
// costs what a 5,000-token one does there, 180 ms, at half the fake runner's work). Poisson arrivals at 0.6 a
// second, prompts of 2,000-3,000 tokens, outputs forced to 400-800, over the KV-checking fake runner.
struct InteractiveResult {
  double p90_ttft = 0, p99_ttft = 0, worst_tpot = 0;
  int completed = 0;
};

InteractiveResult simulate_interactive(bool projected) {
  testing::CheckingFakeRunner fake;
  EngineConfig config = testing::simulated_config({0.0085, 0.0002, 0.000072}, SchedulingPolicy::slo, 2.0, 0.015, 8192);
  config.num_kv_blocks = 16384;
  PoissonLoad load{0.6, 120, {2000, 3000}, {400, 800}, static_cast<int>(fake.config().vocab_size), 15, {}};
  // The rule of banked time: every request may stop at any token (a stop token the fake runner never samples)
  // and is expected to end with the next one.
  if (!projected) {
    config.scheduler.expected_output_tokens = 1;
    load.stop_tokens = {load.vocab};
  }
  InteractiveResult r;
  std::vector<double> ttft;
  for (const Served& s : serve(fake, config, load)) {
    r.completed += s.done;
    ttft.push_back(s.ttft());
    r.worst_tpot = std::max(r.worst_tpot, s.tpot());
  }
  r.p90_ttft = percentile(ttft, 0.90);
  r.p99_ttft = percentile(ttft, 0.99);
  return r;
}

// Under the rule of banked time a request just past its first token holds every step to a few prefill tokens, so
// each prompt is spread over many steps. Projected to their lengths, the young requests afford whole prompts:
// TTFT falls, and every request's mean TPOT still stays under the target.
TEST(SloPolicy, ProjectingTpotToTheOutputLengthLowersTtftAndKeepsEveryMeanUnderTheTarget) {
  const InteractiveResult banked = simulate_interactive(false), projected = simulate_interactive(true);
  std::printf("banked time: p90 / p99 TTFT %.3f / %.3f s, worst TPOT %.2f ms; projected: %.3f / %.3f s, %.2f ms\n",
              banked.p90_ttft, banked.p99_ttft, banked.worst_tpot * 1e3, projected.p90_ttft, projected.p99_ttft,
              projected.worst_tpot * 1e3);
  EXPECT_EQ(banked.completed, 120);
  EXPECT_EQ(projected.completed, 120);
  EXPECT_LE(banked.worst_tpot, 0.015);
  EXPECT_LE(projected.worst_tpot, 0.015);
  EXPECT_LT(projected.p90_ttft, 0.5 * banked.p90_ttft);
  EXPECT_LT(projected.p99_ttft, 0.5 * banked.p99_ttft);
  EXPECT_LE(projected.p99_ttft, 2.0);
}

}  // namespace
}  // namespace moeserve
