// The OpenAI server in process over an engine on a runner, on a free port, shut down at the end of the test.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "server/openai_server.h"

namespace moeserve::testing {

struct ServerHarness {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<server::OpenAiServer> server;
  uint16_t port = 0;

  // served as "tiny"; 4096 KV blocks unless the config sizes the cache.
  ServerHarness(std::shared_ptr<ModelRunner> runner, std::shared_ptr<const Tokenizer> tokenizer,
                const server::ServerOptions& served = server::ServerOptions(), EngineConfig config = EngineConfig()) {
    server::ServerOptions options = served;
    if (config.num_kv_blocks == 0 && config.kv_cache_bytes == 0) config.num_kv_blocks = 4096;
    engine = std::make_shared<Engine>(std::move(runner), config);
    options.http.port = 0;
    options.served_model_name = "tiny";
    server = std::make_unique<server::OpenAiServer>(engine, std::move(tokenizer), options);
    server->start();
    port = server->port();
  }
  ~ServerHarness() { server->shutdown(); }
};

}  // namespace moeserve::testing
