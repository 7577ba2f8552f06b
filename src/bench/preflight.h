// The request the bench sends before anything is timed: one short prompt, a couple of tokens. A server that is
// down, wants an API key, or does not serve the route the --api names then stops the run at once with the reason,
// instead of failing every sample of a timed run (vLLM's benchmark_serving sends such a test prompt first, for the
// same reason). The prompt is the first few tokens of the dataset's first sample: shorter than a KV block with
// its output, so that it leaves nothing in a prefix cache for the timed samples to hit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "bench/dataset.h"
#include "bench/sut.h"

namespace moeserve::bench {

// Forwards the SUT's reports to whichever observer is current: the preflight's, then the run's. The SUT is told of
// one observer at start(); the preflight comes first and hands over once its sample has completed.
class ObserverSwitch : public SampleObserver {
 public:
  void route_to(SampleObserver* target) { target_.store(target); }
  void on_first_token(uint64_t id, std::optional<int32_t> token, TimePoint time) override {
    target_.load()->on_first_token(id, token, time);
  }
  void on_complete(uint64_t id, SampleOutput output, TimePoint time) override {
    target_.load()->on_complete(id, std::move(output), time);
  }

 private:
  std::atomic<SampleObserver*> target_{nullptr};
};

struct PreflightOptions {
  size_t prompt_tokens = 8;  // with max_tokens, under one KV block of the default 16 tokens
  int max_tokens = 2;
  std::chrono::seconds timeout{300};
  const std::atomic<bool>* interrupt = nullptr;  // stops the wait (the request is cancelled)
};

class Preflight : public SampleObserver {
 public:
  // The id of the preflight sample: no sequence id of a run reaches it.
  static constexpr uint64_t kSampleId = ~uint64_t{0};

  // Sends the request through `sut` (already started with `observers` routed here) and waits for it. Throws
  // moeserve::Error with the SUT's reason when it fails, answers no token, or does not answer within the
  // timeout; returns normally when interrupted (the caller sees the flag).
  void run(SystemUnderTest& sut, const DatasetSample& sample, const SamplingParams& sampling,
           const PreflightOptions& options);

  void on_first_token(uint64_t, std::optional<int32_t>, TimePoint) override {}
  void on_complete(uint64_t id, SampleOutput output, TimePoint time) override;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::optional<SampleOutput> output_;
};

}  // namespace moeserve::bench
