// Wraps a runner and advances a virtual clock by a step-cost model's time for each batch it runs, so that tests of
// the scheduling policies check their logic, not the machine's speed. The inner runner computes the real tokens.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_core.h"
#include "engine/request.h"
#include "engine/step_cost.h"
#include "runner/runner.h"

namespace moeserve::testing {

class SimulatedTimeRunner : public ModelRunner {
 public:
  SimulatedTimeRunner(ModelRunner& inner, StepCost cost, TimePoint& clock)
      : inner_(inner), cost_(cost), clock_(clock) {}
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
    const std::chrono::duration<double> seconds(cost_.predict(decode, prefill));
    clock_ += std::chrono::duration_cast<Clock::duration>(seconds);
    steps.push_back({decode, prefill});
  }
  std::vector<std::pair<int, int>> steps;  // (decode, prefill) tokens of every step run

 private:
  ModelRunner& inner_;
  StepCost cost_;
  TimePoint& clock_;
};

// An engine config for a run on the virtual clock: the scheduler's step-cost model is `cost` and stays so (it is
// what the clock advances by), under `policy` with these targets and token budget.
inline EngineConfig simulated_config(const StepCost& cost, SchedulingPolicy policy, double ttft_target_seconds,
                                     double tpot_target_seconds, int max_batched_tokens) {
  EngineConfig config;
  config.num_kv_blocks = 4096;
  config.learn_step_cost = false;
  config.initial_step_cost = cost;
  config.scheduler.policy = policy;
  config.scheduler.max_batched_tokens = max_batched_tokens;
  config.scheduler.ttft_target_seconds = ttft_target_seconds;
  config.scheduler.tpot_target_seconds = tpot_target_seconds;
  return config;
}

}  // namespace moeserve::testing
