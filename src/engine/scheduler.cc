#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

#include "util/error.h"

namespace moeserve {

SchedulingPolicy parse_scheduling_policy(const std::string& name) {
  if (name == "fcfs") return SchedulingPolicy::fcfs;
  if (name == "slo") return SchedulingPolicy::slo;
  fail("unknown scheduling policy \"{}\" (fcfs or slo)", name);
}

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv, const StepCostModel& cost,
                     const OutputLengthEstimate& lengths)
    : config_(config), kv_(kv), cost_(cost), lengths_(lengths) {
  MOESERVE_CHECK(config_.max_num_seqs > 0 && config_.max_batched_tokens > 0,
                 "max_num_seqs and max_batched_tokens must be positive");
  MOESERVE_CHECK(config_.tpot_headroom > 0 && config_.tpot_headroom <= 1, "slo policy: TPOT headroom {} (in (0, 1])",
                 config_.tpot_headroom);
  MOESERVE_CHECK(config_.expected_output_tokens >= 0, "slo policy: expected output tokens {} (0: learnt)",
                 config_.expected_output_tokens);
  MOESERVE_CHECK(config_.kv_watermark >= 0 && config_.kv_watermark < 1, "KV watermark {} (in [0, 1))",
                 config_.kv_watermark);
}

bool Scheduler::before(const Sequence* a, const Sequence* b) const {
  if (config_.policy == SchedulingPolicy::slo) {
    auto da = a->deadline(config_.ttft_target_seconds), db = b->deadline(config_.ttft_target_seconds);
    if (da != db) return da < db;
  }
  if (a->spec.priority != b->spec.priority) return a->spec.priority < b->spec.priority;
  if (a->timing.arrival != b->timing.arrival) return a->timing.arrival < b->timing.arrival;
  return a->id < b->id;
}

void Scheduler::add(Sequence* seq) {
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence* w) { return before(seq, w); });
  waiting_.insert(pos, seq);
}

void Scheduler::remove(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
}

int Scheduler::expected_output_length(const Sequence& seq) const {
  const RequestSpec& spec = seq.spec;
  int length = spec.max_tokens;
  if (may_stop_early(spec)) {
    // min_tokens holds the stop tokens back (a grammar's whole document ends the request regardless).
    const int sure = spec.grammar ? 0 : std::min(spec.processing.min_tokens, spec.max_tokens);
    const int expected = config_.expected_output_tokens > 0 ? config_.expected_output_tokens
                                                             : lengths_.likely_length(seq.num_generated());
    length = std::max(sure, std::min(expected, spec.max_tokens));
  }
  return std::max(length, seq.num_generated() + 1);
}

double Scheduler::tpot_slack(const Sequence& seq, TimePoint now, double this_step, double later_step) const {
  // LoadGen: TPOT = (latency - TTFT) / (tokens - 1). Ending with L tokens, n of them d seconds after the first,
  // this step and the L - n - 1 after it decode-only: d + this_step + extra + (L - n - 1) x later_step must stay
  // within headroom x target x (L - 1).
  const int generated = seq.num_generated(), length = expected_output_length(seq);
  const double since_first = std::chrono::duration<double>(now - *seq.timing.first_token).count();
  return config_.tpot_headroom * config_.tpot_target_seconds * (length - 1) - since_first - this_step -
         (length - generated - 1) * later_step;
}

int Scheduler::token_budget(TimePoint now) const {
  if (config_.policy == SchedulingPolicy::fcfs) return config_.max_batched_tokens;
  const StepCost& c = cost_.cost();
  const int decoders = static_cast<int>(std::count_if(running_.begin(), running_.end(),
                                                      [](const Sequence* s) { return s->num_uncomputed() == 1; }));
  // Later steps decode every running sequence, and one more when a prompt waits: this step's prefill is for it.
  const int later_decoders = static_cast<int>(running_.size()) + (waiting_.empty() ? 0 : 1);
  const double this_step = c.predict(decoders, 0), later_step = c.predict(later_decoders, 0);
  double slack = std::numeric_limits<double>::infinity();
  for (const Sequence* s : running_)
    if (s->num_generated() > 0 && s->timing.first_token)
      slack = std::min(slack, tpot_slack(*s, now, this_step, later_step));
  if (slack == std::numeric_limits<double>::infinity()) return config_.max_batched_tokens;  // no one decoding
  int prefill = config_.max_batched_tokens;
  if (c.per_prefill_token_seconds > 0)
    prefill = static_cast<int>(std::min(slack / c.per_prefill_token_seconds, static_cast<double>(prefill)));
  prefill = std::max(prefill, config_.min_prefill_tokens);
  return std::min(config_.max_batched_tokens, decoders + prefill);
}

bool Scheduler::can_admit_decoder() const {
  if (static_cast<int>(running_.size()) >= config_.max_num_seqs) return false;
  if (config_.policy == SchedulingPolicy::fcfs || running_.empty()) return true;
  // One more decoding sequence must still leave a decode-only step under the TPOT target.
  return cost_.cost().predict(static_cast<int>(running_.size()) + 1, 0) <= config_.tpot_target_seconds;
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput& out) {
  kv_.release(*seq);
  seq->status = SequenceStatus::waiting;
  ++seq->timing.preemptions;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  out.preempted.push_back(seq);
  add(seq);
}

int Scheduler::allocate_chunk(Sequence& seq, int wanted) {
  // A long prefill chunk needs blocks for all of itself in every group; when the pool cannot give that, a shorter
  // chunk (down to one token) may still fit, which is cheaper than preempting anyone.
  for (int n = wanted; n > 0; n /= 2)
    if (kv_.allocate(seq, n)) return n;
  return 0;
}

ScheduledChunk Scheduler::plan_chunk(Sequence& seq, int budget) {
  const int draft = static_cast<int>(seq.draft.size());
  if (seq.num_uncomputed() == 1 && draft > 0 && 1 + draft <= budget && kv_.allocate(seq, 1 + draft))
    return {&seq, 1, true, draft};
  const int n = allocate_chunk(seq, std::min(seq.num_uncomputed(), budget));
  return {&seq, n, seq.num_computed + n == static_cast<int>(seq.tokens.size())};
}

void SchedulerOutput::add(const ScheduledChunk& chunk) {
  chunks.push_back(chunk);
  const int n = chunk.num_tokens + chunk.num_draft;
  (chunk.samples && chunk.num_tokens == 1 ? decode_tokens : prefill_tokens) += n;
}

SchedulerOutput Scheduler::schedule(TimePoint now) {
  SchedulerOutput out;
  int budget = token_budget(now);
  std::sort(running_.begin(), running_.end(), [&](const Sequence* a, const Sequence* b) { return before(a, b); });

  // Running sequences first, in order; when KV runs out, the last in order is preempted (possibly this one). The
  // victim is never one already scheduled in this step: those come before the current sequence.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const ScheduledChunk chunk = plan_chunk(*running_[i], budget);
    if (chunk.num_tokens > 0) {
      out.add(chunk);
      budget -= chunk.num_tokens + chunk.num_draft;
      ++i;
      continue;
    }
    preempt(running_.back(), out);  // frees its blocks; if it was seq, the loop moves on naturally
  }

  // Then admissions from the waiting queue, in order, while budget, sequence slots and KV (above its watermark)
  // allow; none in a step that had to preempt (the pool is short, and a victim would come straight back).
  const int64_t watermark = static_cast<int64_t>(config_.kv_watermark * static_cast<double>(kv_.pool().num_blocks()));
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 && can_admit_decoder()) {
    Sequence* seq = waiting_.front();
    const bool fresh = seq->block_tables.empty();
    if (fresh) {
      const int hit = kv_.match_prefix(*seq);
      if (!seq->timing.first_scheduled) seq->timing.cached_prompt_tokens = hit;
    }
    const ScheduledChunk chunk = plan_chunk(*seq, budget);
    const bool under_watermark = !running_.empty() && kv_.pool().num_available() < watermark;
    if (chunk.num_tokens == 0 || under_watermark) {
      if (fresh)
        kv_.release(*seq);  // its chunk's blocks and any prefix-cache hits go back
      else if (chunk.num_tokens > 0)
        kv_.truncate(*seq);  // the chunk's blocks, past num_computed
      break;
    }
    waiting_.pop_front();
    seq->status = SequenceStatus::running;
    if (!seq->timing.first_scheduled) seq->timing.first_scheduled = now;
    running_.push_back(seq);
    out.add(chunk);
    budget -= chunk.num_tokens + chunk.num_draft;
  }
  return out;
}

}  // namespace moeserve
