// moeserve serve: the OpenAI-compatible HTTP server over the engine.
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/runner_args.h"
#include "server/openai_server.h"
#include "util/error.h"

namespace moeserve::cli {

void register_serve(CLI::App& app) {
  struct Args {
    RunnerArgs runner;
    EngineArgs engine;
    server::ServerOptions server;
    std::string max_body = "8MiB";
    double drain_seconds = 30;
    std::string api_key;
    uint64_t seed = 0;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  add_runner_options(cmd, args->runner);
  add_engine_options(cmd, args->engine);
  auto& s = args->server;
  cmd->add_option("--host", s.http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", s.http.port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--served-model-name", s.served_model_name, "the model name clients use (default: the directory name)");
  cmd->add_option("--max-in-flight", s.max_in_flight, "requests accepted at once; more get 429")->capture_default_str();
  cmd->add_option("--io-threads", s.http.io_threads, "HTTP I/O threads")->capture_default_str();
  cmd->add_option("--max-body", args->max_body, "largest request body (413 above)")->capture_default_str();
  cmd->add_option("--drain-timeout", args->drain_seconds, "seconds to finish requests in flight on SIGTERM")
      ->capture_default_str();
  cmd->add_option("--render-threads", s.render_threads, "threads that parse, render and tokenise request bodies")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  // vLLM's --seed: requests without a "seed" draw theirs from it; without it, from a random one (printed).
  cmd->add_option("--seed", args->seed, "seed that requests without a seed draw theirs from (default: random)");
  cmd->callback([args, cmd] {
    auto opened = open_runner(args->runner);
    std::shared_ptr<const Tokenizer> tokenizer =
        args->runner.model.empty() ? Tokenizer::o200k_harmony() : Tokenizer::from_model_dir(args->runner.model);
    server::ServerOptions options = args->server;
    if (!args->api_key.empty()) options.api_key = args->api_key;
    if (cmd->count("--seed") > 0) options.seed = args->seed;
    options.http.max_body_bytes = static_cast<size_t>(parse_byte_size(args->max_body));
    options.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(args->drain_seconds * 1000));
    if (options.served_model_name == "moeserve" && !args->runner.model.empty())
      options.served_model_name = std::filesystem::path(args->runner.model).filename().string();
    EngineConfig engine_settings = engine_config(args->engine, opened);
    auto engine = std::make_shared<Engine>(std::shared_ptr<ModelRunner>(std::move(opened.runner)), engine_settings);
    server::OpenAiServer server(engine, tokenizer, options);
    fmt::print(stderr, "moeserve: {}; requests without a seed draw from --seed {}\n", engine->capacity_summary(),
               server.seed());
    server.start();
    fmt::print(stderr, "moeserve: serving '{}' on http://{}:{} (Ctrl-C or SIGTERM to stop)\n",
               options.served_model_name, options.http.host, server.port());
    server.serve_until_signal();
    fmt::print(stderr, "moeserve: stopped\n");
  });
}

}  // namespace moeserve::cli
