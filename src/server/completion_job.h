// The answer to a /v1/completions request: one engine request per prompt, raw text out (no Harmony parsing),
// cut at stop strings, plus the generated token ids as the extension field "token_ids" on every choice (MLPerf
// needs the ids); streamed as chunks or collected into one JSON answer. A client that disconnects cancels all
// of its engine requests.
#pragma once

#include <memory>

#include "server/answer_job.h"
#include "server/engine_requests.h"

namespace moeserve::server {

// Submits the request's prompts (the server has admitted it: one place per prompt is taken).
void start_completion_job(JobContext ctx, std::shared_ptr<ResponseChannel> channel, CompletionRequest request);

}  // namespace moeserve::server
