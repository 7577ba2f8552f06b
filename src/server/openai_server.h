// The OpenAI-compatible HTTP API over the engine: /v1/chat/completions, /v1/completions, /v1/responses (the
// subset GPT-OSS clients use), /v1/models, /health and /metrics. Requests become engine requests; tokens stream
// back as server-sent events or are collected into one response; a client that disconnects cancels its request.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "server/http_server.h"
#include "server/prometheus.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

struct ServerOptions {
  HttpServerOptions http;
  std::string served_model_name = "moeserve";
  std::optional<std::string> api_key;  // when set, /v1/* requires "Authorization: Bearer <key>"
  int64_t max_in_flight = 4096;        // requests accepted at once (waiting + running); more get 429
  std::chrono::milliseconds drain_timeout{30'000};
};

class OpenAiServer {
 public:
  OpenAiServer(std::shared_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tokenizer, ServerOptions options);
  ~OpenAiServer();

  void start();
  uint16_t port() const { return http_.port(); }
  // Stops accepting, lets requests in flight finish for up to the drain timeout (then cancels them), flushes
  // their responses and stops the I/O threads.
  void shutdown();
  // After start(): serves until SIGINT or SIGTERM, then shutdown().
  void serve_until_signal();

  bool draining() const { return draining_; }
  // Counts a finished HTTP exchange for /metrics.
  void count(const std::string& route, unsigned status);

 private:
  void handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel);

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ServerOptions options_;
  HttpServer http_;
  std::atomic<bool> draining_{false};
  std::mutex stats_mutex_;
  HttpCounts counts_;
  uint64_t last_scrape_tokens_ = 0;
  std::chrono::steady_clock::time_point last_scrape_ = std::chrono::steady_clock::now();
};

}  // namespace moeserve::server
