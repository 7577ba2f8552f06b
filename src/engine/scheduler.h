// Which sequences run in the next step and with how many tokens: continuous batching with chunked prefill under a
// token budget, admission from the waiting queue, and preemption by recomputation when the KV pool runs out.
//
// Policies:
//  - fcfs: waiting requests in (priority, arrival) order; a fixed token budget per step (max_batched_tokens).
//  - slo:  given p99 targets for TTFT and TPOT, sizes every step by its predicted time (StepCostModel): all
//          running decodes, plus as many prefill tokens as the time every decoding request can spare allows.
//          LoadGen's TPOT is a request's mean over its whole output, (latency - TTFT) / (tokens - 1), and the p99
//          is over requests: a young request can afford a long step now when many fast ones follow. A request
//          expected to end with L tokens, that has n of them d seconds after its first, keeps its mean under
//          tpot_headroom x target (the headroom is for the prediction's error) while
//              d + this step + (L - n - 1) x later decode-only step <= tpot_headroom x target x (L - 1),
//          the later steps predicted with every running sequence decoding, plus one when a prompt waits (this
//          step's prefill is for it; further admissions count from the next step, which projects again). A
//          step's prefill may take the least slack this leaves over the decoding requests.
//          L (expected_output_length): max_tokens for a request that runs to it (no stop tokens or grammar, as
//          bench's fixed output lengths); else min(max_tokens, expected_output_tokens or what recent finished
//          requests that got as far reached: output_length.h), or min_tokens if more; never below n + 1. With
//          nothing known L is n + 1, the rule of banked time: the next token within n x headroom x target - d.
//          The step may spend a request's whole remaining slack, not a share kept back for prompts expected
//          later: every decoding request pays for a step's prefill together, so the one with least slack (near
//          its end, or one that has paid for many prompts) bounds the step and a young request's slack goes
//          only where all can afford it; a waiting prompt then goes whole into the first step that can afford
//          its uncached tokens, which costs the decoders less than chunks (on a GPU each pays a full read of the
//          expert weights: ~25 ms for a 200-token chunk of gpt-oss-120b) and brings its first token sooner.
//          The price: once a burst has spent the decoders' slack, prompts get min_prefill_tokens a step until
//          those requests finish, as under the rule of banked time.
//          Admits waiting requests earliest deadline first (arrival + TTFT target, or the request's own deadline)
//          and stops admitting when one more decoding sequence would push a decode-only step over the target.
// Both admit a waiting request only while the KV pool keeps its watermark of available blocks (kv_watermark).
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "engine/kv_manager.h"
#include "engine/output_length.h"
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
  // slo policy: the output tokens expected of a request that may stop early (stop tokens or a grammar), capped by
  // its max_tokens; 0: learnt from recent finished requests (OutputLengthEstimate). 1 plans each token of such a
  // request as its last (the rule of banked time).
  int expected_output_tokens = 0;
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
  void add(const ScheduledChunk& chunk);  // appends chunk and counts its tokens
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv, const StepCostModel& cost,
            const OutputLengthEstimate& lengths);

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
  // slo policy: the output tokens seq is expected to end with (L above), at least num_generated() + 1.
  int expected_output_length(const Sequence& seq) const;
  // slo policy: the time a step may spend beyond its decode-only part and keep seq's projected mean TPOT under
  // headroom x target; this_step and later_step are decode-only step times (now, and in the steps after).
  double tpot_slack(const Sequence& seq, TimePoint now, double this_step, double later_step) const;
  bool can_admit_decoder() const;
  void preempt(Sequence* seq, SchedulerOutput& out);
  // Allocates KV for the largest chunk of at most `wanted` tokens that fits (halving); 0 when none does.
  int allocate_chunk(Sequence& seq, int wanted);
  // The chunk seq computes within `budget`, its KV allocated: the last token and its whole draft when budget and
  // KV allow (a speculating sequence reserves room for all of it), else what allocate_chunk finds (a draft that
  // does not fit is not verified this step). num_tokens 0 when nothing fits.
  ScheduledChunk plan_chunk(Sequence& seq, int budget);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  const StepCostModel& cost_;
  const OutputLengthEstimate& lengths_;
  std::vector<Sequence*> running_;  // in scheduling order
  std::deque<Sequence*> waiting_;
};

}  // namespace moeserve
