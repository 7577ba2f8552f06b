// The in-process engine as a system under test: samples go straight to Engine::submit with LoadGen's scheduled
// time as the request's arrival, and the first-token and completion times are the engine's own event times
// (taken when the token was produced, without any transport in between).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_set>

#include "bench/engine_series.h"
#include "bench/sut.h"
#include "engine/engine.h"

namespace moeserve::bench {

class InProcessSut : public SystemUnderTest {
 public:
  // `stop_tokens` end a sample unless it asks for a minimum length (the model's end-of-sequence ids);
  // `description` is what describe() returns (model, checkpoint, precisions: see repro.h).
  InProcessSut(std::shared_ptr<Engine> engine, std::vector<int32_t> stop_tokens, nlohmann::json description);

  std::string name() const override { return "moeserve-inprocess"; }
  // The description given, plus the engine's speculative-decoding counters once it has verified drafts.
  nlohmann::json describe() const override;
  // start() also starts sampling the engine's batch, KV use, preemptions, prefix hits and step time; stop() ends it.
  void start(SampleObserver& observer) override;
  void issue(std::span<const SampleRequest> samples) override;
  void cancel_all() override;
  void stop() override { sampler_.stop(); }
  nlohmann::json timeline(TimePoint origin) const override { return sampler_.to_json(origin); }

 private:
  std::shared_ptr<Engine> engine_;
  std::vector<int32_t> stop_tokens_;
  nlohmann::json description_;
  SampleObserver* observer_ = nullptr;
  std::mutex mutex_;
  std::unordered_set<uint64_t> active_;          // engine request ids still running
  std::unordered_set<uint64_t> finished_early_;  // finished before submit() returned their id
  EngineSampler sampler_;
};

}  // namespace moeserve::bench
