// The stress tests' random scenarios over the KV-checking fake runner (fake_runner.h): random arrivals,
// cancellations, tiny KV budgets, block sizes, token budgets, policies, with and without prefix caching.
#pragma once

#include <map>
#include <random>
#include <vector>

#include "engine/engine_harness.h"
#include "engine/fake_runner.h"

namespace moeserve::testing {

struct Scenario {
  EngineConfig config;
  std::vector<Arrival> arrivals;
  std::map<uint64_t, int> cancel_at_step;
};

inline Scenario random_scenario(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Scenario s;
  s.config.block_size = std::vector<int>{1, 2, 4, 8}[pick(0, 3)];
  s.config.scheduler.max_batched_tokens = pick(1, 64);
  s.config.scheduler.max_num_seqs = pick(1, 12);
  s.config.scheduler.policy = pick(0, 1) ? SchedulingPolicy::slo : SchedulingPolicy::fcfs;
  s.config.scheduler.tpot_target_seconds = 0.01 + 0.001 * pick(0, 20);
  s.config.prefix_caching = pick(0, 3) != 0;
  std::vector<int32_t> shared(pick(1, 40));
  for (auto& t : shared) t = pick(0, 999);
  int longest = 0;
  const int count = pick(1, 24);
  for (int i = 0; i < count; ++i) {
    Arrival a;
    a.step = pick(0, 30);
    if (pick(0, 1)) a.spec.prompt.assign(shared.begin(), shared.begin() + pick(1, shared.size()));
    for (int n = pick(a.spec.prompt.empty() ? 1 : 0, 40); n > 0; --n) a.spec.prompt.push_back(pick(0, 999));
    a.spec.max_tokens = pick(1, 30);
    a.spec.sampling.temperature = pick(0, 1) ? 1.0f : 0.0f;
    a.spec.sampling.seed = pick(0, 1 << 20);
    if (pick(0, 4) == 0) a.spec.stop_tokens = {pick(0, 999)};
    a.spec.priority = pick(0, 2);
    longest = std::max<int>(longest, a.spec.prompt.size() + a.spec.max_tokens);
    if (pick(0, 5) == 0) s.cancel_at_step[i] = a.step + pick(0, 25);
    s.arrivals.push_back(std::move(a));
  }
  // Just enough blocks for the longest request alone, sometimes a little more: preemption is the norm.
  testing::CheckingFakeRunner probe;
  KvCacheManager sizing(kv_groups_of(probe.config()), probe.config().sliding_window, 1, s.config.block_size, false);
  s.config.num_kv_blocks = sizing.blocks_needed(longest) + pick(0, 12);
  // Half the scenarios keep a KV watermark at admission, up to 30% of these small pools (drawn last, so that the
  // draws above are those of the scenarios before the watermark existed).
  s.config.scheduler.kv_watermark = pick(0, 1) ? 0.01 * pick(1, 30) : 0.0;
  return s;
}

}  // namespace moeserve::testing
