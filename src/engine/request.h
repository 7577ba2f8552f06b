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
#include "sampling/logits_processing.h"
#include "sampling/logprobs.h"
#include "sampling/sampling_params.h"
#include "structured/token_mask.h"

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
  // Penalties, logit_bias, min_tokens (which holds stop_tokens back): applied before every draw.
  LogitsProcessing processing;
  // Raw logprobs of every generated token with this many top tokens (0: the token's own only); -1: none.
  int top_logprobs = -1;
  // Also of every prompt token after the first (completions' echo), with max(top_logprobs, 0) top tokens. Such a
  // request computes its whole prompt: it takes no prefix-cache hit.
  bool prompt_logprobs = false;
  // Constrained decoding (structured/token_mask.h): once the output ends with grammar_trigger (from the first
  // token when it is empty), every token keeps the output after it a prefix of a document of `grammar`; once the
  // document is whole only stop_tokens may follow, and without stop tokens the request ends there.
  std::shared_ptr<const structured::TokenGrammar> grammar;
  std::vector<int32_t> grammar_trigger;
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
  std::vector<TokenLogprobs> logprobs;         // one per token, when the request asked for them
  std::vector<TokenLogprobs> prompt_logprobs;  // on the first event, when asked: prompt tokens 1, 2, ...
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
