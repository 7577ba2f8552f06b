// What the jobs that answer a request (assistant_job.h, completion_job.h) share: the server's side of them, the
// engine request behind an answer, usage counts, ids and JSON replies.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/admission.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

struct JobContext {
  Engine& engine;
  const Tokenizer& tokenizer;
  std::shared_ptr<Admission> admission;  // shared with the engine's callbacks, which free places
  std::string served_model_name;
  // Counts the answer's status for /metrics.
  std::function<void(unsigned status)> count;
};

// The engine request behind one answer: its admission place is freed when it finishes (or when submit fails).
// Cancellation may come before the id is known (from the answer's own first events, which can arrive before
// submit() returns, or from a disconnect), so the id and the wish are tracked under one lock.
class EngineJob {
 public:
  void submit(const JobContext& ctx, RequestSpec spec, EventCallback on_event);
  void cancel(Engine& engine);

 private:
  std::mutex mutex_;
  std::optional<uint64_t> id_;
  bool cancel_wanted_ = false;
};

// A prompt's choices after its first (n > 1): held until the first has computed the prompt (its first event),
// then submitted, so that they take its KV from the prefix cache: one prefill for n choices.
class LaterChoices {
 public:
  void hold(size_t index, RequestSpec spec) { held_.emplace_back(index, std::move(spec)); }
  // Hands each held choice, once, to submit(index, spec); one whose submit throws (the engine is stopping) goes
  // to refused(index, what) and the others are still submitted.
  void release(const std::function<void(size_t, RequestSpec)>& submit,
               const std::function<void(size_t, const char*)>& refused);

 private:
  std::vector<std::pair<size_t, RequestSpec>> held_;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  nlohmann::json chat() const;
  nlohmann::json completions() const;
  nlohmann::json responses() const;
};

// Whether token k of the event is the stop token that ended its request (an end of sequence, one of
// stop_token_ids). vLLM leaves that token out of the answer's text (include_stop_str_in_output is false by
// default); its id, logprobs and count stay.
bool ends_on_stop_token(const RequestEvent& e, size_t k, const std::vector<TokenId>& stop_tokens);

std::string random_id(const char* prefix);
int64_t unix_now();
// Compact JSON; invalid UTF-8 (from a token split inside a character) replaced, never an exception.
std::string dump(const nlohmann::json& j);
void respond_json(ResponseChannel& channel, unsigned status, const nlohmann::json& body,
                  std::vector<std::pair<std::string, std::string>> headers = {});

}  // namespace moeserve::server
