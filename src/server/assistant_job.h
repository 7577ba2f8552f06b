// The answer to a chat completion or a Responses API request: the engine's tokens read as Harmony
// (assistant_stream.h) and sent as OpenAI's chat chunks or Responses events when streaming, else collected into
// one JSON answer; a client that disconnects cancels the engine request.
#pragma once

#include <memory>

#include "server/answer_job.h"
#include "server/engine_requests.h"

namespace moeserve::server {

enum class AssistantApi { chat, responses };

// Submits the request (the server has admitted it: its one place is taken). A Responses API response that
// completes (or is cut off) goes to `keep` too, when given (the response store).
void start_assistant_job(JobContext ctx, std::shared_ptr<ResponseChannel> channel, AssistantApi api,
                         AssistantRequest request, std::function<void(const nlohmann::json&)> keep = {});

}  // namespace moeserve::server
