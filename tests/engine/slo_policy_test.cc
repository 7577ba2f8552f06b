// The TTFT/TPOT-aware policy against FCFS in a simulated load on the tiny model. Time is virtual: every step
// advances the clock by a fixed step-cost model, so the test checks the policy's logic, not the machine's speed.
// The runner computes the real tokens.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_core.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"

namespace moeserve {
namespace {

// Wraps a runner and advances a virtual clock by the cost of each batch it runs.
class SimulatedTimeRunner : public ModelRunner {
 public:
  SimulatedTimeRunner(ModelRunner& inner, StepCost cost, TimePoint& clock) : inner_(inner), cost_(cost), clock_(clock) {}
  std::string name() const override { return "simulated " + inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  size_t kv_block_bytes(int block_size) const override { return inner_.kv_block_bytes(block_size); }
  void allocate_kv_cache(const KvCacheLayout& layout) override { inner_.allocate_kv_cache(layout); }
  const KvCacheLayout& kv_cache_layout() const override { return inner_.kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override {
    int decode = 0, prefill = 0;
    for (const auto& s : batch.sequences) {
      const bool is_decode = s.tokens.size() == 1 && s.num_logits == 1;
      (is_decode ? decode : prefill) += static_cast<int>(s.tokens.size());
    }
    inner_.forward(batch, output);
    clock_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cost_.predict(decode, prefill)));
    steps.push_back({decode, prefill});
  }
  std::vector<std::pair<int, int>> steps;  // (decode, prefill) tokens of every step run

 private:
  ModelRunner& inner_;
  StepCost cost_;
  TimePoint& clock_;
};

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

LoadResult simulate(SchedulingPolicy policy, const StepCost& cost) {
  CpuRunner cpu(tiny_checkpoint(), 2);
  TimePoint clock{};
  SimulatedTimeRunner runner(cpu, cost, clock);
  EngineConfig config;
  config.block_size = 16;
  config.num_kv_blocks = 4096;
  config.learn_step_cost = false;
  config.initial_step_cost = cost;
  config.scheduler.policy = policy;
  config.scheduler.max_batched_tokens = 2048;
  config.scheduler.ttft_target_seconds = 2.0;
  config.scheduler.tpot_target_seconds = 0.060;
  EngineCore core(runner, config, [&] { return clock; });

  // Poisson arrivals at 5 requests/s; prompts 200-800 tokens, 16-48 output tokens. Same load for both policies.
  std::mt19937 rng(2024);
  std::exponential_distribution<double> gap(5.0);
  std::uniform_int_distribution<int> prompt_len(200, 800), out_len(16, 48), id(0, 511);
  struct Pending {
    TimePoint at;
    RequestSpec spec;
  };
  std::vector<Pending> pending;
  TimePoint t{};
  for (int i = 0; i < kRequests; ++i) {
    t += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    Pending p{t, {}};
    for (int n = prompt_len(rng); n > 0; --n) p.spec.prompt.push_back(id(rng));
    p.spec.max_tokens = out_len(rng);
    p.spec.sampling.temperature = 0;
    p.spec.arrival = t;
    pending.push_back(std::move(p));
  }
  struct Seen {
    TimePoint first{}, last{};
    int tokens = 0;
    bool done = false;
  };
  std::vector<Seen> seen(pending.size());
  size_t next = 0;
  while (next < pending.size() || core.has_work()) {
    while (next < pending.size() && pending[next].at <= clock) {
      core.add_request(next, pending[next].spec, [&seen](const RequestEvent& e) {
        Seen& s = seen[e.request_id];
        if (s.tokens == 0 && !e.tokens.empty()) s.first = e.time;
        s.tokens += static_cast<int>(e.tokens.size());
        s.last = e.time;
        s.done = e.finish == FinishReason::length;
      });
      ++next;
    }
    if (!core.has_work()) {
      clock = pending[next].at;
      continue;
    }
    core.step();
  }
  LoadResult r;
  std::vector<double> tpot, ttft;
  int tokens = 0;
  TimePoint last_finish{};
  for (size_t i = 0; i < seen.size(); ++i) {
    const Seen& s = seen[i];
    r.completed += s.done;
    tokens += s.tokens;
    last_finish = std::max(last_finish, s.last);
    ttft.push_back(std::chrono::duration<double>(s.first - pending[i].at).count());
    // LoadGen: TPOT = (latency - TTFT) / (tokens - 1).
    if (s.tokens > 1) tpot.push_back(std::chrono::duration<double>(s.last - s.first).count() / (s.tokens - 1));
  }
  r.p99_tpot = percentile(tpot, 0.99);
  r.p99_ttft = percentile(ttft, 0.99);
  r.throughput = tokens / std::chrono::duration<double>(last_finish - pending.front().at).count();
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
  EngineConfig config;
  config.num_kv_blocks = 4096;
  config.learn_step_cost = false;
  config.initial_step_cost = cost;
  config.scheduler.policy = SchedulingPolicy::slo;
  config.scheduler.max_batched_tokens = 4096;
  config.scheduler.ttft_target_seconds = 3.0;
  config.scheduler.tpot_target_seconds = 0.060;
  EngineCore core(runner, config, [&] { return clock; });
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

}  // namespace
}  // namespace moeserve
