// What a client submits to the engine and what it gets back: a stream of events carrying tokens with the time
// they were produced, and one final event with the finish reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runner/drafter.h"
#include "sampling/sampling_params.h"

namespace moeserve {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

enum class FinishReason { none, stop, length, cancelled, error };
const char* finish_reason_name(FinishReason reason);

struct RequestSpec {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<int32_t> stop_tokens;  // the request finishes after emitting one of these (it is included)
  int priority = 0;                  // lower is more urgent; ties go to the earlier arrival
  std::optional<TimePoint> deadline;  // for the SLO-aware policy: when the first token is due
  // When the request was issued; defaults to submission time. Benchmarks set the scheduled time here so that
  // queue time and TTFT count from it, as LoadGen does.
  std::optional<TimePoint> arrival;
  // Speculative decoding for this request; unset takes the engine's --speculative-config (num_draft_tokens 0: off).
  std::optional<speculative::DraftShape> speculation;
};

// One event of a request's stream: new tokens (one per step, or all the tokens a speculative verify step
// emitted) and, on the last event, the finish reason.
struct RequestEvent {
  uint64_t request_id = 0;
  std::vector<int32_t> tokens;
  TimePoint time;
  FinishReason finish = FinishReason::none;
  std::string error;  // for FinishReason::error
};

using EventCallback = std::function<void(const RequestEvent&)>;

// Per-request timing, filled in as the request runs; final once finished.
struct RequestTiming {
  TimePoint arrival;
  std::optional<TimePoint> first_scheduled;
  std::optional<TimePoint> first_token;
  std::optional<TimePoint> last_token;
  std::optional<TimePoint> finished;
  int prompt_tokens = 0;
  int output_tokens = 0;
  int cached_prompt_tokens = 0;  // served from the prefix cache at (first) admission
  int preemptions = 0;

  double queue_seconds() const;
  double ttft_seconds() const;
  // LoadGen: TPOT = (latency - TTFT) / (tokens - 1); 0 when fewer than two tokens.
  double tpot_seconds() const;
};

}  // namespace moeserve
