// The bench knows a system under test only through this interface (LoadGen's SystemUnderTest with its
// FirstTokenComplete / QuerySamplesComplete callbacks, reshaped for C++): the bench issues samples, the SUT
// reports each sample's first token and its completion with the times it observed them. Implementations:
// sut_http.h (an OpenAI-compatible or SGLang server: `moeserve serve`, vLLM, SGLang, TensorRT-LLM) and the
// in-process engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampling_params.h"

namespace moeserve::bench {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// One sample to run: LoadGen's QuerySample (an id and the dataset index) plus what our QSL holds for it.
struct SampleRequest {
  uint64_t id = 0;                  // unique within the run: LoadGen's sample sequence id
  uint64_t qsl_idx = 0;             // the dataset row
  std::span<const int32_t> prompt;  // token ids; the bench keeps them alive until the sample completes
  int max_tokens = 0;               // new tokens at most
  // Generate at least this many tokens, ignoring end-of-sequence before that (synthetic datasets with a given
  // output-length distribution); 0 stops at the model's end of sequence as MLPerf runs do.
  int min_tokens = 0;
  SamplingParams sampling;
  TimePoint scheduled;  // LoadGen's scheduled time: latencies count from here, not from when it reached the SUT
};

// How a sample ended.
struct SampleOutput {
  std::vector<int32_t> tokens;  // every generated token id, in order; empty when the SUT reports no ids
  // Generated tokens. Equal to tokens.size() when the ids are known; otherwise what the SUT counted (see
  // sut_http.h for how a text-only stream is counted).
  int64_t token_count = 0;
  bool token_ids_known = true;
  std::string finish_reason;  // "stop", "length", ... as the SUT says
  std::string error;          // not empty: the sample failed (transport error, server error, cancelled)
};

// Receives a SUT's reports. Calls may come from any thread, but for one sample in order: at most one
// on_first_token, then exactly one on_complete (also for failed and cancelled samples).
class SampleObserver {
 public:
  virtual ~SampleObserver() = default;
  // The first output token was observed at `time`; `token` is its id, or nullopt when the SUT only sees text.
  virtual void on_first_token(uint64_t id, std::optional<int32_t> token, TimePoint time) = 0;
  // The sample finished at `time`.
  virtual void on_complete(uint64_t id, SampleOutput output, TimePoint time) = 0;
};

class SystemUnderTest {
 public:
  virtual ~SystemUnderTest() = default;

  // Shown as LoadGen's "SUT name".
  virtual std::string name() const = 0;
  // What a result must record to be reproduced: model config and checkpoint hash, precision of each tensor
  // class as loaded, KV dtype, server version... (absent keys: unknown to this SUT).
  virtual nlohmann::json describe() const = 0;

  // Called once, before the first issue; reports go to `observer` until stop() returns.
  virtual void start(SampleObserver& observer) = 0;
  // Hands samples over and returns without waiting for them (LoadGen's IssueQuery).
  virtual void issue(std::span<const SampleRequest> samples) = 0;
  // No more samples will come (LoadGen's FlushQueries).
  virtual void flush() {}
  // Stops every outstanding sample; each still completes, with error "cancelled".
  virtual void cancel_all() = 0;
  // Waits for the SUT's threads; no reports after it returns.
  virtual void stop() = 0;
  // What the SUT recorded of itself over the last run, times in seconds since `origin` (the in-process engine:
  // batch size, KV use, preemptions, prefix hits, step time); null when it records nothing.
  virtual nlohmann::json timeline(TimePoint /*origin*/) const { return nullptr; }
};

}  // namespace moeserve::bench
