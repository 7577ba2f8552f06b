// The OpenAI server over the tiny model in process, with the transport options a test sets, and the check every
// transport regression test ends with: the server still answers /health and a tiny-model completion exactly.
#pragma once

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "server/http_client.h"
#include "server/openai_server.h"

namespace moeserve::testing {

struct TinyServer {
  explicit TinyServer(server::HttpServerOptions http = {}, std::optional<std::string> api_key = std::nullopt);
  ~TinyServer();

  std::shared_ptr<Engine> engine;
  std::unique_ptr<server::OpenAiServer> server;
  uint16_t port = 0;
};

// A greedy completion request's body ("model": "tiny"), and the tokens the tiny model gives it alone.
nlohmann::json tiny_completion(int prompt_variant, int max_tokens, bool stream);
std::vector<int32_t> tiny_completion_tokens(int prompt_variant, int max_tokens);
// The token ids of a completion response body, whole or streamed (server-sent events).
std::vector<int32_t> completion_tokens(const std::string& body, bool streamed);

// The process's resident memory after returning freed heap pages to the system (/proc/self/statm).
size_t resident_bytes();

// Expects (gtest) a response in OpenAI's error shape with this status and `fragment` in its message.
void expect_api_error(const HttpResult& response, unsigned status, const std::string& fragment);

// Expects (gtest) /health to answer 200 and a 4-token greedy completion to give the tiny model's own tokens.
void expect_still_serving(uint16_t port);

}  // namespace moeserve::testing
