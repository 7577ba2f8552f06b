#include "bench/sut_inprocess.h"

#include "util/error.h"

namespace moeserve::bench {

InProcessSut::InProcessSut(std::shared_ptr<Engine> engine, std::vector<int32_t> stop_tokens, nlohmann::json description)
    : engine_(std::move(engine)),
      stop_tokens_(std::move(stop_tokens)),
      description_(std::move(description)),
      sampler_(engine_) {}

void InProcessSut::start(SampleObserver& observer) {
  observer_ = &observer;
  sampler_.start();
}

nlohmann::json InProcessSut::describe() const {
  nlohmann::json description = description_;
  const EngineMetrics m = engine_->metrics();
  // What the run cost the engine: steps, recomputation after preemption, prefix-cache hits.
  description["engine"]["run"] = {{"steps", m.steps},
                                  {"busy_seconds", m.busy_seconds},
                                  {"preemptions", m.preemptions},
                                  {"prompt_tokens_computed", m.prompt_tokens_computed},
                                  {"generated_tokens", m.generated_tokens},
                                  {"prefix_hit_rate", m.prefix_hit_rate()}};
  if (m.spec_drafts > 0)
    description["speculative_decoding"] = {{"drafts", m.spec_drafts},
                                           {"draft_tokens", m.spec_draft_tokens},
                                           {"accepted_tokens", m.spec_accepted_tokens},
                                           {"mean_acceptance_length", m.spec_acceptance_length()},
                                           {"acceptance_rate_per_position", m.spec_acceptance_rates()}};
  return description;
}

void InProcessSut::issue(std::span<const SampleRequest> samples) {
  MOESERVE_CHECK(observer_ != nullptr, "internal: the in-process SUT was not started");
  for (const SampleRequest& sample : samples) {
    RequestSpec spec;
    spec.prompt.assign(sample.prompt.begin(), sample.prompt.end());
    spec.sampling = sample.sampling;
    spec.max_tokens = sample.max_tokens;
    // A sample with a minimum length (synthetic output lengths) runs to max_tokens: the engine has no separate
    // minimum, and the bench sets min_tokens equal to max_tokens.
    if (sample.min_tokens == 0) spec.stop_tokens = stop_tokens_;
    spec.arrival = sample.scheduled;
    // The engine's events for one request arrive in order on its thread; this state is the sample's own.
    struct Progress {
      SampleOutput output;
      bool first_reported = false;
    };
    auto progress = std::make_shared<Progress>();
    const uint64_t sample_id = sample.id;
    auto on_event = [this, progress, sample_id](const RequestEvent& event) {
      SampleOutput& out = progress->output;
      out.tokens.insert(out.tokens.end(), event.tokens.begin(), event.tokens.end());
      if (!progress->first_reported && !out.tokens.empty()) {
        progress->first_reported = true;
        observer_->on_first_token(sample_id, out.tokens.front(), event.time);
      }
      if (event.finish == FinishReason::none) return;
      {
        std::lock_guard lock(mutex_);
        // A request may finish before issue() has recorded its id; leave a note for issue() then.
        if (active_.erase(event.request_id) == 0) finished_early_.insert(event.request_id);
      }
      out.token_count = static_cast<int64_t>(out.tokens.size());
      out.finish_reason = finish_reason_name(event.finish);
      if (event.finish == FinishReason::error) out.error = event.error;
      if (event.finish == FinishReason::cancelled) out.error = "cancelled";
      observer_->on_complete(sample_id, std::move(out), event.time);
    };
    uint64_t id = 0;
    try {
      id = engine_->submit(std::move(spec), std::move(on_event));
    } catch (const Error& e) {
      // A request the engine can never run (too long for the context, ...) fails as a sample, as on a server.
      SampleOutput failed;
      failed.error = e.what();
      observer_->on_complete(sample_id, std::move(failed), Clock::now());
      continue;
    }
    std::lock_guard lock(mutex_);
    if (finished_early_.erase(id) == 0) active_.insert(id);
  }
}

void InProcessSut::cancel_all() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mutex_);
    ids.assign(active_.begin(), active_.end());
  }
  for (uint64_t id : ids) engine_->cancel(id);
}

}  // namespace moeserve::bench
