// EngineCore's steps in time (engine_core.h): each one scheduled, launched on the runner, advanced and collected,
// one after the other or, with async scheduling, the next scheduled while the runner runs this one. What a step
// computes and commits (its batch, the update from its output) is in engine_core.cc.
#include "engine/engine_core.h"

#include <algorithm>

namespace moeserve {
namespace {

// The token a step launched but not yet collected will sample, in its sequence's tokens until update() puts the
// real one in its place; outside the vocabulary, so that a runner handed it fails rather than computing on it.
constexpr int32_t kPlaceholderToken = -1;

}  // namespace

void EngineCore::withdraw(Sequence& seq) {
  kv_.release(seq);
  scheduler_.remove(&seq);
}

void EngineCore::finish_cancelled() {
  std::vector<Sequence*> cancelled;
  for (auto& [id, seq] : sequences_)
    if (seq->cancel_requested) cancelled.push_back(seq.get());
  auto in_flight = [&](const Sequence* seq) {
    return in_flight_ && std::any_of(in_flight_->plan.chunks.begin(), in_flight_->plan.chunks.end(),
                                     [&](const ScheduledChunk& c) { return c.seq == seq; });
  };
  for (Sequence* seq : cancelled) {
    if (in_flight(seq))
      withdraw(*seq);
    else
      finish(*seq, FinishReason::cancelled);
  }
}

bool EngineCore::can_schedule_ahead(const ScheduledStep& step) const {
  // The host must see a step's tokens before it can prepare the next one when the next draw depends on them:
  // speculative decoding (drafts verified and proposed after the step) and logits processing (penalties over the
  // history, a grammar's mask). Such steps are followed synchronously.
  return std::none_of(step.plan.chunks.begin(), step.plan.chunks.end(), [](const ScheduledChunk& c) {
    const Sequence& seq = *c.seq;
    return c.num_draft > 0 || seq.speculates() ||
           (c.samples && (seq.spec.processing.active() || seq.spec.grammar != nullptr));
  });
}

std::optional<ScheduledStep> EngineCore::schedule_step(StepReport& report) {
  finish_cancelled();
  ScheduledStep step;
  step.plan = scheduler_.schedule(now_());
  report.preempted = static_cast<int>(step.plan.preempted.size());
  metrics_.preemptions += step.plan.preempted.size();
  if (step.plan.chunks.empty()) return std::nullopt;
  prepare(step.plan, step.prepared);
  return step;
}

void EngineCore::drop_finished(ScheduledStep& step) const {
  auto finished = [](const ScheduledChunk& c) { return c.seq->status == SequenceStatus::finished; };
  if (std::none_of(step.plan.chunks.begin(), step.plan.chunks.end(), finished)) return;
  SchedulerOutput kept;
  kept.preempted = std::move(step.plan.preempted);
  for (const ScheduledChunk& chunk : step.plan.chunks)
    if (!finished(chunk)) kept.add(chunk);
  // Their blocks went back when they finished; the others' are as scheduled. Their batch is prepared again.
  step.plan = std::move(kept);
  step.prepared = {};
  prepare(step.plan, step.prepared);
}

void EngineCore::launch(ScheduledStep step) {
  step.launched = Clock::now();
  try {
    runner_.launch(step.prepared.batch);
  } catch (const std::exception& e) {
    // The step failed as a whole: its requests end with the error, the engine carries on with the others.
    for (const ScheduledChunk& chunk : step.plan.chunks) finish_with_error(*chunk.seq, e.what());
    return;
  }
  advance(step);
  in_flight_ = std::move(step);
}

void EngineCore::advance(ScheduledStep& step) {
  step.starts.resize(step.plan.chunks.size());
  for (size_t c = 0; c < step.plan.chunks.size(); ++c) {
    const ScheduledChunk& chunk = step.plan.chunks[c];
    Sequence& seq = *chunk.seq;
    step.starts[c] = seq.num_computed;
    if (chunk.num_draft > 0) continue;  // a verify step's outcome is known only from its output
    seq.num_computed += chunk.num_tokens;
    // The token's own KV is computed by the step after; the blocks before it are now whole.
    if (chunk.samples) seq.tokens.push_back(kPlaceholderToken);
    kv_.commit(seq);
    if (chunk.samples && reached_length(seq)) withdraw(seq);
  }
}

void EngineCore::complete_in_flight(StepReport& report) {
  ScheduledStep step = std::move(*in_flight_);
  in_flight_.reset();
  try {
    runner_.collect(output_);
  } catch (const std::exception& e) {
    // The KV of full blocks advance() committed to the prefix cache may not have been written. A failure here
    // comes from the device after the launch (a CUDA error), which fails the steps that follow as well.
    for (const ScheduledChunk& chunk : step.plan.chunks)
      if (chunk.seq->status != SequenceStatus::finished) finish_with_error(*chunk.seq, e.what());
    return;
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - step.launched).count();
  report.sequences = static_cast<int>(step.plan.chunks.size());
  report.decode_tokens = step.plan.decode_tokens;
  report.prefill_tokens = step.plan.prefill_tokens;
  update(step);
  record_step(report);
  finish_cancelled();  // those withdrawn while the step ran, their tokens now out
}

// vLLM v1's EngineCore.step(): schedule, execute, update from the output. With async scheduling the order turns
// (vLLM's --async-scheduling): step N+1 is scheduled and prepared while the runner runs step N, as if every
// sequence of step N had its token (advance() left a placeholder for it); then step N is collected and updated,
// the sequences it finished are dropped from step N+1, whose decode inputs now hold the tokens just sampled, and
// step N+1 is launched. Unless a stop token, an error or a grammar ends a request the host could not foresee, the
// scheduler sees exactly what a synchronous step would show it, so steps and preemptions are the same; when one
// does, step N+1 runs without that request where a synchronous step would have given its place to another.
StepReport EngineCore::step() {
  StepReport report;
  const bool ahead = in_flight_ && can_schedule_ahead(*in_flight_);
  std::optional<ScheduledStep> next;
  if (ahead) next = schedule_step(report);
  if (in_flight_) complete_in_flight(report);
  if (!ahead)
    next = schedule_step(report);
  else if (next)
    drop_finished(*next);
  if (next && !next->plan.chunks.empty()) launch(std::move(*next));
  if (!config_.async_scheduling && in_flight_) complete_in_flight(report);
  update_gauges();
  retired_.clear();
  return report;
}

}  // namespace moeserve
