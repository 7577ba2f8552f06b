#include "engine/request.h"

namespace moeserve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none:
      return "none";
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
  }
  return "?";
}

namespace {
double seconds(TimePoint a, TimePoint b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

double RequestTiming::queue_seconds() const { return first_scheduled ? seconds(arrival, *first_scheduled) : 0.0; }
double RequestTiming::ttft_seconds() const { return first_token ? seconds(arrival, *first_token) : 0.0; }
double RequestTiming::tpot_seconds() const {
  if (!first_token || !finished || output_tokens < 2) return 0.0;
  return seconds(*first_token, *finished) / (output_tokens - 1);
}

}  // namespace moeserve
