// The engine's synchronous core: requests in, one step at a time (schedule, run the batch on the runner, sample,
// stream tokens out). It is driven by the threaded Engine in production and directly, with a virtual clock, by
// simulations and tests.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "engine/kv_manager.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_cost.h"
#include "runner/runner.h"

namespace moeserve {

struct EngineConfig {
  int block_size = 16;          // token slots per KV block
  double kv_cache_fraction = 0;  // KV pool = this fraction of the runner's free device memory (GPU runners)
  int64_t kv_cache_bytes = 0;    // else a memory budget in bytes; when both are 0, num_kv_blocks is used
  int64_t num_kv_blocks = 0;
  bool prefix_caching = true;
  SchedulerConfig scheduler;
  StepCost initial_step_cost;   // the slo policy's step-time model until measurements refine it
  bool learn_step_cost = true;  // refit the model from measured step times (off for virtual-clock simulations)
};

struct StepReport {
  int sequences = 0;
  int decode_tokens = 0;
  int prefill_tokens = 0;
  int preempted = 0;
  double seconds = 0;  // measured on the steady clock, whatever clock timestamps come from
};

class EngineCore {
 public:
  using NowFn = std::function<TimePoint()>;

  EngineCore(ModelRunner& runner, EngineConfig config, NowFn now = Clock::now);

  // Fails (moeserve::Error, naming the field) when the request can never run: empty prompt, ids outside the
  // vocabulary, max_tokens < 1, prompt plus max_tokens over the context or over the whole KV pool, bad sampling.
  void validate(const RequestSpec& spec) const;
  void add_request(uint64_t id, RequestSpec spec, EventCallback on_event);
  // Cancels a waiting or running request before the next step (no effect once it has finished).
  void cancel(uint64_t id);
  bool has_work() const { return !sequences_.empty(); }
  StepReport step();

  // The longest sequence (prompt plus output) that fits the model's context and the whole KV pool.
  int64_t max_sequence_tokens() const;
  // Counters as of now and gauges read fresh (also valid from inside an event callback during step()).
  EngineMetrics metrics() const;
  const KvCacheManager& kv() const { return kv_; }
  const StepCostModel& step_cost() const { return cost_; }
  // "KV cache: N blocks of B tokens (X MiB), holds T tokens of full-attention context".
  std::string capacity_summary() const;

 private:
  void finish(Sequence& seq, FinishReason reason, std::vector<int32_t> tokens, std::string error = {});
  void record_finish_metrics(const Sequence& seq, FinishReason reason);
  void update_gauges();

  ModelRunner& runner_;
  EngineConfig config_;
  NowFn now_;
  KvCacheManager kv_;
  StepCostModel cost_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  EngineMetrics metrics_;
  ForwardOutput output_;
};

}  // namespace moeserve
