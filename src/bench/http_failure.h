// Why a request to the server under test failed, in words that say what to do about it. The usual first-run
// mistakes each get their own sentence: the server is not running, it wants an API key (or refused the one given),
// or the --api names a route the server does not have (an OpenAI-compatible server has no /generate, SGLang's
// native API is not at /v1/completions).
#pragma once

#include <string>
#include <string_view>

#include "bench/stream_protocol.h"

namespace moeserve::bench {

enum class ConnectFailure { refused, timed_out, other };

// "connection refused at 127.0.0.1:8000: is the server running?"
std::string connect_failure_text(const HttpEndpoint& endpoint, ConnectFailure kind, std::string_view detail);

struct HttpStatusContext {
  std::string path;             // the request's path, e.g. /v1/completions
  HttpApi api = HttpApi::openai;
  bool api_key_given = false;  // --api-key or OPENAI_API_KEY was set
};

// "HTTP 401 Unauthorized on /v1/completions: pass --api-key or set OPENAI_API_KEY", with the start of the server's
// own error body after it.
std::string http_status_text(int status, const HttpStatusContext& context, std::string_view body);

}  // namespace moeserve::bench
