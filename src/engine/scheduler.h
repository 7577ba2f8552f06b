// Which sequences run in the next step and with how many tokens: continuous batching with chunked prefill under a
// token budget, admission from the waiting queue, and preemption by recomputation when the KV pool runs out.
//
// Policies:
//  - fcfs: waiting requests in (priority, arrival) order; a fixed token budget per step (max_batched_tokens).
//  - slo:  given p99 targets for TTFT and TPOT, sizes every step by its predicted time (StepCostModel): all
//          running decodes, plus as many prefill tokens as the time every decoding request can spare allows.
//          LoadGen's TPOT is a request's mean time per output token, (latency - TTFT) / (tokens - 1), not a
//          bound on each step, so a request that has n tokens d seconds after its first can wait
//          n x target - d for its next one and still have a mean under the target whenever it ends. The step
//          may take the least of that over the decoding requests (times tpot_headroom, for the prediction's
//          error): decode-only steps that run under the target bank the time a burst of prompts then spends on
//          prefill (lower TTFT at the same TPOT), and a request's first tokens still come within the target.
//          Admits waiting requests earliest deadline first (arrival + TTFT target, or the request's own deadline)
//          and stops admitting when one more decoding sequence would push a decode-only step over the target.
// Both admit a waiting request only while the KV pool keeps its watermark of available blocks (kv_watermark).
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "engine/kv_manager.h"
#include "engine/sequence.h"
#include "engine/step_cost.h"

namespace moeserve {

enum class SchedulingPolicy { fcfs, slo };
SchedulingPolicy parse_scheduling_policy(const std::string& name);

struct SchedulerConfig {
  SchedulingPolicy policy = SchedulingPolicy::fcfs;
  int max_num_seqs = 256;           // sequences running at once
  int max_batched_tokens = 2048;    // tokens per step (decode tokens plus prefill chunks)
  double ttft_target_seconds = 3.0;   // slo policy: p99 TTFT target (MLPerf gpt-oss-120b Server: 3 s)
  double tpot_target_seconds = 0.080;  // slo policy: p99 TPOT target (MLPerf gpt-oss-120b Server: 80 ms)
  int min_prefill_tokens = 16;      // slo policy: prefill progress guaranteed per step while requests wait
  double tpot_headroom = 0.9;       // slo policy: the share of each request's TPOT budget a step may plan to use
  // Admission leaves at least this share of the KV pool's blocks available (vLLM's block-manager watermark, 1%),
  // so that the running sequences' growth does not preempt the prompt just admitted: without it, a pool-bound
  // Offline run admitted a prompt whenever a finished sequence's blocks came back, and the next steps' growth
  // then preempted that prompt and recomputed it (docs/PERF.md: 16% extra prefill at the MLPerf shape). Not
  // applied while nothing runs, so a request that fits the pool is always admitted.
  double kv_watermark = 0.01;
};

struct ScheduledChunk {
  Sequence* seq;
  int num_tokens;     // tokens[seq->num_computed, + num_tokens) are computed this step
  bool samples;       // this chunk reaches the end of seq's tokens, so a new token is sampled
  int num_draft = 0;  // seq->draft's tokens verified after that last token (speculative decoding)
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // sent back to waiting, KV given back (recomputed later)
  int decode_tokens = 0;
  int prefill_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv, const StepCostModel& cost);

  const SchedulerConfig& config() const { return config_; }
  void add(Sequence* seq);     // to the waiting queue
  void remove(Sequence* seq);  // from wherever it is (finished or cancelled); the caller releases its KV
  SchedulerOutput schedule(TimePoint now);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  const std::vector<Sequence*>& running() const { return running_; }

 private:
  bool before(const Sequence* a, const Sequence* b) const;  // scheduling order
  int token_budget(TimePoint now) const;
  bool can_admit_decoder() const;
  void preempt(Sequence* seq, SchedulerOutput& out);
  // Allocates KV for the largest chunk of at most `wanted` tokens that fits (halving); 0 when none does.
  int allocate_chunk(Sequence& seq, int wanted);
  // The chunk seq computes within `budget`, its KV allocated: the last token and its whole draft when budget and
  // KV allow (a speculating sequence reserves room for all of it), else what allocate_chunk finds (a draft that
  // does not fit is not verified this step). num_tokens 0 when nothing fits.
  ScheduledChunk plan_chunk(Sequence& seq, int budget);
  void add_chunk(const ScheduledChunk& chunk, SchedulerOutput& out, int& budget) const;

  SchedulerConfig config_;
  KvCacheManager& kv_;
  const StepCostModel& cost_;
  std::vector<Sequence*> running_;  // in scheduling order
  std::deque<Sequence*> waiting_;
};

}  // namespace moeserve
