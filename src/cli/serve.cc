// moeserve serve: the OpenAI-compatible HTTP server over the engine. It binds its port first (a port in use fails
// at once, not after minutes of loading a 120b model), answers 503 while it loads, then logs one line with the
// engine's and speculation's settings and, every --log-stats-interval seconds, vLLM's stats line.
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "cli/cli_flags.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/runner_args.h"
#include "server/openai_server.h"
#include "server/stats_logger.h"
#include "util/error.h"
#include "util/log.h"

namespace moeserve::cli {

namespace {

// vLLM's --allowed-origins is a JSON list ('["https://a.example"]'); a comma-separated list is taken too.
std::vector<std::string> parse_origins(const std::string& text) {
  std::vector<std::string> origins;
  if (!text.empty() && text.front() == '[') {
    const auto parsed = nlohmann::json::parse(text, nullptr, false);
    MOESERVE_CHECK(parsed.is_array(), "--allowed-origins '{}' is not a JSON list of origins", text);
    for (const auto& origin : parsed) {
      MOESERVE_CHECK(origin.is_string(), "--allowed-origins '{}': every origin must be a string", text);
      origins.push_back(origin.get<std::string>());
    }
    return origins;
  }
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) origins.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return origins;
}

// The one line that says how the engine runs, so a log shows what a measurement was taken with.
std::string settings_line(const RunnerArgs& runner, const EngineConfig& c, int64_t max_model_len) {
  std::string line = fmt::format(
      "engine: device {}, dtype {}, kv-cache-dtype {}, activation-dtype {}, tensor-parallel-size {}{}, max-model-len {}, "
      "max-num-seqs {}, max-num-batched-tokens {}, block-size {}, prefix caching {}, scheduler {}",
      runner.device, runner.device == "cuda" ? (runner.precision == "f32" ? "float32" : "bfloat16") : "float32",
      runner.kv_cache_dtype, runner.activation_dtype, runner.tensor_parallel_size, runner.enable_expert_parallel ? " (expert parallel)" : "", max_model_len, c.scheduler.max_num_seqs, c.scheduler.max_batched_tokens, c.block_size,
      c.prefix_caching ? "on" : "off", c.scheduler.policy == SchedulingPolicy::slo ? "slo" : "fcfs");
  if (c.scheduler.policy == SchedulingPolicy::slo)
    line += fmt::format(" (TTFT target {:g} ms, TPOT target {:g} ms)", c.scheduler.ttft_target_seconds * 1000,
                        c.scheduler.tpot_target_seconds * 1000);
  const auto& s = c.speculative;
  if (!s.enabled()) return line + "; speculative decoding off";
  line += fmt::format("; speculative decoding {} (model {}, {} draft tokens", s.method, s.model.empty() ? "-" : s.model,
                      s.num_speculative_tokens);
  if (s.eagle_topk > 1) line += fmt::format(", tree top-k {}, {} verified per step", s.eagle_topk, s.num_draft_tokens);
  if (s.test_acceptance_rate) line += fmt::format(", TEST acceptance rate {}", *s.test_acceptance_rate);
  return line + ")";
}

}  // namespace

void register_serve(CLI::App& app) {
  struct Args {
    RunnerArgs runner;
    EngineArgs engine;
    server::ServerOptions server;
    std::string max_body = "8MiB";
    double drain_seconds = 30;
    std::string api_key;
    uint64_t seed = 0;
    std::string tokenizer;
    std::string allowed_origins;
    std::string log_level = "info";
    bool disable_log_stats = false;
    double log_stats_interval = 10;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  add_runner_options(cmd, args->runner);
  add_engine_options(cmd, args->engine);
  auto& s = args->server;
  cmd->add_option("--host", s.http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", s.http.port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--served-model-name", s.served_model_name,
                  "the model name clients use (default: the directory name)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json or .tiktoken file, or a directory holding one (default: the model directory's)");
  cmd->add_option("--responses-store-size", s.responses_store_size,
                  "Responses API: responses kept in memory for previous_response_id and GET /v1/responses/{id} "
                  "(least recently used dropped first; 0: none)")
      ->capture_default_str();
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
  cmd->add_option("--allowed-origins", args->allowed_origins,
                  "CORS: origins whose pages may call the server, as a JSON list ('[\"*\"]': any) or comma-separated "
                  "(default: none, no CORS headers)");
  cmd->add_flag("--enable-log-requests", s.http.access_log,
                "log one line per response: client \"METHOD target HTTP/1.1\" status (uvicorn's access log)");
  cmd->add_option("--log-level", args->log_level, "debug, info, warning or error")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str();
  cmd->add_flag("--disable-log-stats", args->disable_log_stats, "no periodic stats line");
  cmd->add_option("--log-stats-interval", args->log_stats_interval, "seconds between stats lines (vLLM: 10)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([args, cmd] {
    set_log_level(parse_log_level(args->log_level));
    server::ServerOptions options = args->server;
    if (!args->api_key.empty()) options.api_key = args->api_key;
    if (cmd->count("--seed") > 0) options.seed = args->seed;
    options.http.max_body_bytes = static_cast<size_t>(parse_byte_size(args->max_body));
    options.http.allowed_origins = parse_origins(args->allowed_origins);
    options.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(args->drain_seconds * 1000));
    const std::string& model = args->runner.model;
    if (options.served_model_name == "moeserve" && !model.empty()) {
      std::filesystem::path dir(model);
      if (dir.filename().empty()) dir = dir.parent_path();  // "models/gpt-oss-120b/"
      options.served_model_name = dir.filename().string();
    }
    check_model_directory(model);
    const std::string tokenizer_source = !args->tokenizer.empty() ? args->tokenizer : model;
    std::shared_ptr<const Tokenizer> tokenizer = tokenizer_source.empty() ? Tokenizer::o200k_harmony()
                                                 : std::filesystem::is_directory(tokenizer_source)
                                                     ? Tokenizer::from_model_dir(tokenizer_source)
                                                     : Tokenizer::from_file(tokenizer_source);
    server::OpenAiServer server(tokenizer, options);
    server.start();
    log_info("serving '{}' on http://{}:{}; loading the model (requests get 503 until it is ready)",
             options.served_model_name, options.http.host, server.port());
    const auto load_start = std::chrono::steady_clock::now();
    log_info("loading {} on the {} runner", model.empty() ? "synthetic " + args->runner.synthetic : model,
             args->runner.device);
    auto opened = open_runner(args->runner);
    log_info("weights loaded in {:.1f} s",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
    EngineConfig engine_settings = engine_config(args->engine, opened);
    auto engine = std::make_shared<Engine>(std::shared_ptr<ModelRunner>(std::move(opened.runner)), engine_settings);
    log_info("{}", engine->capacity_summary());
    log_info("{}", settings_line(args->runner, engine_settings, engine->max_sequence_tokens()));
    server.serve_engine(engine);
    std::optional<server::StatsLogger> stats;
    if (!args->disable_log_stats)
      stats.emplace(engine, std::chrono::milliseconds(static_cast<int64_t>(args->log_stats_interval * 1000)));
    log_info(
        "ready in {:.1f} s on http://{}:{} (Ctrl-C or SIGTERM to stop); requests without a seed draw from "
        "--seed {}",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(), options.http.host,
        server.port(), server.seed());
    server.serve_until_signal();
    log_info("stopped");
  });
}

}  // namespace moeserve::cli
