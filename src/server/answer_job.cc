#include "server/answer_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <random>
#include <utility>

namespace moeserve::server {

using nlohmann::json;

void EngineJob::submit(const JobContext& ctx, RequestSpec spec, EventCallback on_event) {
  uint64_t id = 0;
  try {
    // Events carry the id, so a cancel from the first ones (a stop string) works before submit() returns. The
    // place is free before the final event is answered: a client that sends its next request on reading the
    // answer finds it free. (The job that owns this EngineJob outlives the callback, which holds the job.)
    id = ctx.engine.submit(std::move(spec), [this, admission = ctx.admission, on_event = std::move(on_event)](
                                                const RequestEvent& e) {
      {
        std::lock_guard lock(mutex_);
        id_ = e.request_id;
      }
      if (e.finish != FinishReason::none) admission->release();
      on_event(e);
    });
  } catch (...) {
    ctx.admission->release();
    throw;
  }
  std::lock_guard lock(mutex_);
  id_ = id;
  if (cancel_wanted_) ctx.engine.cancel(id);
}

void EngineJob::cancel(Engine& engine) {
  std::lock_guard lock(mutex_);
  cancel_wanted_ = true;
  if (id_) engine.cancel(*id_);
}

bool ends_on_stop_token(const RequestEvent& e, size_t k, const std::vector<TokenId>& stop_tokens) {
  return k + 1 == e.tokens.size() && e.finish == FinishReason::stop &&
         std::find(stop_tokens.begin(), stop_tokens.end(), e.tokens[k]) != stop_tokens.end();
}

void LaterChoices::release(const std::function<void(size_t, RequestSpec)>& submit,
                           const std::function<void(size_t, const char*)>& refused) {
  for (auto& [index, spec] : std::exchange(held_, {})) {
    try {
      submit(index, std::move(spec));
    } catch (const std::exception& e) {
      refused(index, e.what());
    }
  }
}

json Usage::chat() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"completion_tokens_details", {{"reasoning_tokens", reasoning_tokens}}}};
}

json Usage::completions() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json Usage::responses() const {
  return {{"input_tokens", prompt_tokens},
          {"output_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}}};
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void respond_json(ResponseChannel& channel, unsigned status, const json& body,
                  std::vector<std::pair<std::string, std::string>> headers) {
  channel.respond(status, "application/json", dump(body), std::move(headers));
}

}  // namespace moeserve::server
