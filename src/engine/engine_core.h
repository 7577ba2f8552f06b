// The engine's core: requests in, one step at a time (schedule, run the batch on the runner, sample, stream tokens
// out), optionally with the next step scheduled while the runner runs this one (async scheduling). It is driven by
// the threaded Engine in production and directly, with a virtual clock, by simulations and tests.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/kv_manager.h"
#include "engine/metrics.h"
#include "engine/output_length.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative/speculative_config.h"
#include "engine/step_cost.h"
#include "runner/drafter.h"
#include "runner/runner.h"

namespace moeserve {

struct EngineConfig {
  int block_size = 16;          // token slots per KV block
  double kv_cache_fraction = 0;  // KV pool = this fraction of the runner's free device memory (GPU runners)
  int64_t kv_cache_bytes = 0;    // else a memory budget in bytes; when both are 0, num_kv_blocks is used
  int64_t num_kv_blocks = 0;
  // The longest prompt plus output a request may have (vLLM's --max-model-len); 0: the model's context.
  int64_t max_model_len = 0;
  bool prefix_caching = true;
  SchedulerConfig scheduler;
  StepCost initial_step_cost;   // the slo policy's step-time model until measurements refine it
  bool learn_step_cost = true;  // refit the model from measured step times (off for virtual-clock simulations)
  // Speculative decoding: the default draft shape of every request and the test switch (speculative_config.h),
  // and the drafter that proposes drafts (built from `speculative` by make_drafter, or a test drafter).
  speculative::SpeculativeConfig speculative;
  std::shared_ptr<speculative::Drafter> drafter;
  // vLLM's --async-scheduling: step N+1 is scheduled and prepared on the host while the runner runs step N (see
  // EngineCore::step). The tokens, events and finish reasons are those of synchronous steps.
  bool async_scheduling = false;
};

// A step that ran to completion (with async scheduling, step() completes the step launched by the call before).
struct StepReport {
  int sequences = 0;
  int decode_tokens = 0;  // including draft tokens verified
  int prefill_tokens = 0;
  int preempted = 0;  // by the scheduling done in this call (of the step it launched)
  double seconds = 0;  // measured on the steady clock, whatever clock timestamps come from
};

// Blocks of the KV pool an engine with this config gets on this runner (a fraction of device memory, a byte
// budget or a count).
int64_t kv_blocks_for(const ModelRunner& runner, const EngineConfig& config);

// What the engine hands the runner for one step: the batch, and the verify runs it points into.
struct PreparedStep {
  ForwardBatch batch;
  std::vector<std::vector<int32_t>> verify_tokens, verify_parents;  // per chunk; empty unless it verifies a draft
  std::vector<std::vector<LogitEdit>> logit_edits;    // per chunk; empty unless its draw is edited
  std::vector<std::vector<int32_t>> logprob_tokens;   // per chunk; the prompt's next tokens for prompt logprobs
  std::vector<std::shared_ptr<const structured::TokenMask>> allowed;  // per chunk; null unless constrained
};

// A step from its scheduling to its update: the plan, its batch, and each chunk's num_computed before the step
// (advance() moves it when the step is launched).
struct ScheduledStep {
  SchedulerOutput plan;
  PreparedStep prepared;
  std::vector<int32_t> starts;
  Clock::time_point launched;
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
  // One step: schedule, execute on the runner, update the sequences from its output. With async scheduling the
  // step launched by the previous call is completed and the next one launched, its scheduling done while the
  // previous one ran (vLLM's async scheduling); the report is the completed step's.
  StepReport step();

  // The longest sequence (prompt plus output) that fits max_model_len (the model's context) and the whole KV pool.
  int64_t max_sequence_tokens() const;
  // Counters as of now and gauges read fresh (also valid from inside an event callback during step()).
  EngineMetrics metrics() const;
  const KvCacheManager& kv() const { return kv_; }
  const StepCostModel& step_cost() const { return cost_; }
  // "KV cache: N blocks of B tokens (X MiB), holds T tokens of full-attention context".
  std::string capacity_summary() const;

 private:
  int64_t max_model_len() const;
  // Ends seq with `event` as its last event (its tokens, logprobs or error; id, time and reason are set here).
  void finish(Sequence& seq, FinishReason reason, RequestEvent event = {});
  // finish() with FinishReason::error, `error` the message of its last event.
  void finish_with_error(Sequence& seq, std::string error);
  // Appends a step's new tokens to seq, up to and including the first that ends it (stop token, max_tokens, the
  // context), and streams them as one event with their logprobs (one per token, or none) and, on the first event,
  // the prompt's. True when seq finished (and is gone).
  bool emit(Sequence& seq, const std::vector<int32_t>& tokens, std::vector<TokenLogprobs> logprobs,
            TimePoint produced);
  // Verifies seq's draft against the step's output rows [first_row, first_row + rows) (1 + draft: the runner's
  // greedy tokens for greedy requests, the logits otherwise), commits the accepted path's KV and rolls back the
  // rest; returns the tokens to emit. The step's token rows of the root and the accepted nodes go to fed_rows.
  std::vector<int32_t> verify(Sequence& seq, int64_t first_row, int64_t rows, int64_t first_token_row,
                              std::vector<int64_t>& fed_rows);
  // The draft seq may ask for now: its shape cut to what max_tokens, the context and the step budget leave.
  speculative::DraftShape next_draft_shape(const Sequence& seq) const;
  // Finishes the cancelled requests; one in the step in flight is withdrawn instead (KV given back, no longer
  // scheduled) and finished once that step's tokens are out, as a synchronous step would have emitted them.
  void finish_cancelled();
  // Takes seq out of scheduling and gives back its KV while its last step is in flight (it finishes after it).
  void withdraw(Sequence& seq);
  // Whether seq has reached max_tokens or the context (with the token just appended, or the placeholder for it).
  bool reached_length(const Sequence& seq) const;
  // Cancellations, the scheduler's plan and its batch; nullopt when nothing is scheduled.
  std::optional<ScheduledStep> schedule_step(StepReport& report);
  // The scheduled chunks as the runner's batch.
  void prepare(const SchedulerOutput& plan, PreparedStep& prepared) const;
  // Async scheduling: whether the step after `step` may be scheduled before step's tokens are known.
  bool can_schedule_ahead(const ScheduledStep& step) const;
  // Async scheduling: drops from a step scheduled ahead the sequences that finished in the step before it.
  void drop_finished(ScheduledStep& step) const;
  // Launches the step on the runner and advances its sequences (advance); a launch that fails finishes the
  // step's requests with the error.
  void launch(ScheduledStep step);
  // What a launched step is sure to do, applied at launch: num_computed moves past the chunk, a sampling chunk
  // appends a placeholder for its token (replaced in update), full blocks are committed, and a sequence whose
  // token ends it whatever it is (max_tokens, the context) is withdrawn. The scheduling of the next step, done
  // before the tokens are known, then sees what it would see after update.
  void advance(ScheduledStep& step);
  // Waits for the step in flight and updates from it.
  void complete_in_flight(StepReport& report);
  // Commits what the step computed: verifies drafts, emits tokens, finishes sequences, asks for the next drafts.
  void update(const ScheduledStep& step);
  // The logits edits of seq's next draw: its penalties, logit_bias and, before min_tokens, its stop tokens banned.
  std::vector<LogitEdit> next_logit_edits(const Sequence& seq) const;
  // The tokens seq's grammar allows next: the grammar's mask, or once its document is whole the stop tokens.
  std::shared_ptr<const structured::TokenMask> allowed_tokens(const Sequence& seq) const;
  // Moves seq's grammar over an emitted token (or starts it at its trigger); false when the token breaks it.
  bool advance_grammar(Sequence& seq, int32_t token);
  // Stores the prompt logprobs of a chunk's rows (prompt positions start .. start + rows - 1 predict the next).
  void gather_prompt_logprobs(Sequence& seq, int32_t start, int64_t first_row, int64_t rows);
  void record_step(const StepReport& report);
  void record_finish_metrics(const Sequence& seq, FinishReason reason);
  void update_gauges();

  ModelRunner& runner_;
  EngineConfig config_;
  NowFn now_;
  KvCacheManager kv_;
  StepCostModel cost_;
  OutputLengthEstimate output_lengths_;  // of finished requests that could have stopped early, for the slo policy
  Scheduler scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  // Finished in this step() call; kept to its end, since a step scheduled ahead may still point to them.
  std::vector<std::unique_ptr<Sequence>> retired_;
  std::optional<ScheduledStep> in_flight_;  // launched on the runner, not yet collected
  EngineMetrics metrics_;
  ForwardOutput output_;
  std::vector<int> aux_layers_;  // the drafter's feature layers, captured in steps with speculating sequences
};

}  // namespace moeserve
