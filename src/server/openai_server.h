// The OpenAI-compatible HTTP API over the engine: /v1/chat/completions, /v1/completions, /v1/responses (the
// subset GPT-OSS clients use), /v1/models and /v1/models/{id}, vLLM's /tokenize, /detokenize and /version,
// /health and /metrics. The I/O threads route requests and answer the
// cheap ones; request bodies are turned into engine requests on a small pool of render workers
// (engine_requests.h), so heavy bodies never hold up /health or other connections. Tokens stream back as
// server-sent events or are collected into one response; a client that disconnects cancels its request.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "sampling/seed_source.h"
#include "server/admission.h"
#include "server/http_server.h"
#include "server/prometheus.h"
#include "server/render_pool.h"
#include "server/response_store.h"
#include "server/request_fields.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

struct ServerOptions {
  HttpServerOptions http;
  std::string served_model_name = "moeserve";
  std::optional<std::string> api_key;  // when set, /v1/* requires "Authorization: Bearer <key>"
  // Engine requests accepted at once (rendering, waiting or running; a completions request takes one per
  // prompt); more get 429.
  int64_t max_in_flight = 4096;
  std::chrono::milliseconds drain_timeout{30'000};
  int render_threads = 2;  // workers that parse, render and tokenise request bodies
  // The seed unseeded requests draw theirs from (vLLM's --seed); unset: random at start-up.
  std::optional<uint64_t> seed;
  RequestLimits limits;
  // Responses kept for previous_response_id and GET /v1/responses/{id} (the least recently used dropped first);
  // 0 keeps none.
  size_t responses_store_size = 1000;
};

class OpenAiServer {
 public:
  OpenAiServer(std::shared_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tokenizer, ServerOptions options);
  // A server whose engine comes later (serve_engine): `moeserve serve` binds its port before it loads the weights.
  // Until then /health and the API answer 503, /version answers.
  OpenAiServer(std::shared_ptr<const Tokenizer> tokenizer, ServerOptions options);
  ~OpenAiServer();

  // Binds the address and starts the I/O threads; fails (moeserve::Error) when the address cannot be bound.
  void start();
  void serve_engine(std::shared_ptr<Engine> engine);
  uint16_t port() const { return http_.port(); }
  // Stops accepting, lets requests in flight finish for up to the drain timeout (then cancels them), flushes
  // their responses and stops the I/O threads.
  void shutdown();
  // After start(): serves until SIGINT or SIGTERM, then shutdown().
  void serve_until_signal();

  bool draining() const { return draining_; }
  // Counts a finished HTTP exchange for /metrics.
  void count(const std::string& route, unsigned status);
  // The seed unseeded requests draw from (logged at start-up, so a run can be replayed with --seed).
  uint64_t seed() const { return seeds_.seed(); }

 private:
  void handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel);
  // On a render worker: the body to engine requests, admission, submission; errors answered.
  void render_and_submit(const std::string& path, const HttpRequest& request, std::shared_ptr<ResponseChannel> channel);

  std::atomic<std::shared_ptr<Engine>> engine_;  // null while loading
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<structured::GrammarCache> grammars_;  // response_format schemas, compiled once each
  ServerOptions options_;
  std::shared_ptr<Admission> admission_;
  std::shared_ptr<ResponseStore> responses_;  // shared with the jobs that add to it
  SeedSource seeds_;
  RenderPool render_pool_;
  HttpServer http_;
  std::atomic<bool> draining_{false};
  std::mutex stats_mutex_;
  HttpCounts counts_;
};

}  // namespace moeserve::server
