#include "server/openai_server.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <boost/asio/signal_set.hpp>

#include <cctype>

#include "server/api_error.h"
#include "server/assistant_job.h"
#include "server/completion_job.h"
#include "server/engine_requests.h"
#include "server/structured_outputs.h"
#include "server/bearer_auth.h"
#include "server/tokenize_routes.h"
#include "util/error.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

ApiError at_limit(int64_t max_in_flight) {
  return ApiError(429, fmt::format("the server is at its limit of {} requests in flight; retry shortly", max_in_flight),
                  "rate_limit_error");
}

// The routes this server answers, as /metrics labels them: any other path is "other", so that clients probing
// paths cannot grow the label set without bound.
std::string route_label(const std::string& path) {
  static const char* const kRoutes[] = {"/health",          "/metrics",   "/version",         "/v1/models",
                                        "/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize",
                                        "/detokenize"};
  for (const char* route : kRoutes)
    if (path == route) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{model}";
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  return "other";
}

// A path segment as clients send it: the official clients percent-encode a model id ("openai%2Fgpt-oss-120b").
std::string percent_decoded(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

bool is_render_route(const std::string& path) {
  return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/responses" ||
         path == "/tokenize" || path == "/detokenize";
}

}  // namespace

OpenAiServer::OpenAiServer(std::shared_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tokenizer,
                           ServerOptions options)
    : OpenAiServer(std::move(tokenizer), std::move(options)) {
  serve_engine(std::move(engine));
}

OpenAiServer::OpenAiServer(std::shared_ptr<const Tokenizer> tokenizer, ServerOptions options)
    : tokenizer_(std::move(tokenizer)),
      options_(std::move(options)),
      admission_(std::make_shared<Admission>(options_.max_in_flight)),
      responses_(std::make_shared<ResponseStore>(options_.responses_store_size)),
      seeds_(options_.seed),
      render_pool_(options_.render_threads),
      http_(options_.http, [this](HttpRequest r, std::shared_ptr<ResponseChannel> c) { handle(std::move(r), std::move(c)); }) {}

OpenAiServer::~OpenAiServer() {
  // As shutdown() (a no-op once it ran): the engine may outlive this server (it is shared), and a finished request's
  // job is released on the engine's thread after the client has read the whole response (the count() callback into
  // this server after its final event; its response channel, whose session lives in this server's io_context, when
  // the engine drops the finished sequence at the end of its step). Destroying the server under it was a
  // use-after-free (glibc's "corrupted size vs. prev_size" in BenchEndToEnd, about 1 run in 75): drain first.
  shutdown();
}

void OpenAiServer::start() { http_.start(); }

void OpenAiServer::serve_engine(std::shared_ptr<Engine> engine) {
  // The grammar cache reads the model's vocabulary; it is in place before requests can see the engine.
  grammars_ = std::make_unique<structured::GrammarCache>(vocabulary_of(*tokenizer_, engine->model_config().vocab_size));
  engine_.store(std::move(engine));
}

void OpenAiServer::count(const std::string& route, unsigned status) {
  std::lock_guard lock(stats_mutex_);
  ++counts_.by_route_status[{route_label(route), status}];
}

void OpenAiServer::handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
  const std::string target(request.target());
  const std::string path = target.substr(0, target.find('?'));
  const bool is_post = request.method() == http::verb::post;
  auto reply_error = [&](const ApiError& e, std::vector<std::pair<std::string, std::string>> headers = {}) {
    respond_json(*channel, e.status(), e.to_json(), std::move(headers));
    count(path, e.status());
  };
  try {
    const std::shared_ptr<Engine> engine = engine_.load();
    if (path == "/health") {
      if (draining_) throw ApiError(503, "the server is shutting down", "server_error");
      if (!engine) throw ApiError(503, "the model is still loading", "server_error");
      channel->respond(200, "application/json", R"({"status":"ok"})");
      count(path, 200);
      return;
    }
    if (path == "/version") {
      respond_json(*channel, 200, {{"version", MOESERVE_VERSION}});
      count(path, 200);
      return;
    }
    // Bound before the weights load (so that a taken port fails at once): until then only the above answer.
    if (!engine) {
      reply_error(ApiError(503, "the model is still loading; retry shortly", "server_error"), {{"Retry-After", "5"}});
      return;
    }
    if (path == "/metrics") {
      const EngineMetrics m = engine->metrics();
      std::string text;
      {
        std::lock_guard lock(stats_mutex_);
        text = render_prometheus(m, counts_, options_.served_model_name);
      }
      channel->respond(200, "text/plain; version=0.0.4", std::move(text));
      count(path, 200);
      return;
    }
    if (path.rfind("/v1/", 0) == 0 && options_.api_key) {
      const auto auth = request[http::field::authorization];
      if (!bearer_token_matches(std::string_view(auth.data(), auth.size()), *options_.api_key))
        throw ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "incorrect API key",
                       "invalid_request_error", std::nullopt, "invalid_api_key");
    }
    const json model = {{"id", options_.served_model_name}, {"object", "model"}, {"created", unix_now()},
                        {"owned_by", "moeserve"}, {"root", options_.served_model_name},
                        {"max_model_len", engine->max_sequence_tokens()}};
    if (path == "/v1/models") {
      respond_json(*channel, 200, {{"object", "list"}, {"data", json::array({model})}});
      count(path, 200);
      return;
    }
    if (path.rfind("/v1/models/", 0) == 0) {
      const std::string id = percent_decoded(path.substr(std::string("/v1/models/").size()));
      if (id != options_.served_model_name)
        throw ApiError(404, fmt::format("The model '{}' does not exist (this server serves '{}')", id,
                                        options_.served_model_name),
                       "invalid_request_error", "model", "model_not_found");
      respond_json(*channel, 200, model);
      count(path, 200);
      return;
    }
    if (path.rfind("/v1/responses/", 0) == 0) {
      const std::string id = percent_decoded(path.substr(std::string("/v1/responses/").size()));
      const auto stored = responses_->get(id);
      if (!stored) throw ApiError(404, fmt::format("Response with id '{}' not found.", id), "invalid_request_error");
      respond_json(*channel, 200, stored->response);
      count(path, 200);
      return;
    }
    if (!is_render_route(path)) throw ApiError(404, fmt::format("no route for {}", path), "invalid_request_error");
    if (!is_post) throw ApiError(405, fmt::format("{} takes POST", path), "invalid_request_error");
    if (draining_) throw ApiError(503, "the server is shutting down", "server_error");
    if (!admission_->arrive()) {
      reply_error(at_limit(options_.max_in_flight), {{"Retry-After", "1"}});
      return;
    }
    auto body = std::make_shared<HttpRequest>(std::move(request));
    if (!render_pool_.submit([this, path, body, channel] { render_and_submit(path, *body, channel); })) {
      admission_->release();
      throw ApiError(503, "the server is shutting down", "server_error");
    }
  } catch (const ApiError& e) {
    reply_error(e);
  }
}

void OpenAiServer::render_and_submit(const std::string& path, const HttpRequest& request,
                                     std::shared_ptr<ResponseChannel> channel) {
  // Set before handle() passed the request on, and never unset.
  Engine& engine = *engine_.load();
  bool holds_render_place = true;  // until admit() trades it for the request's places (or frees it)
  auto admit = [&](size_t engine_requests) {
    holds_render_place = false;
    if (!admission_->admit(static_cast<int64_t>(engine_requests))) throw at_limit(options_.max_in_flight);
  };
  auto validate = [&](const RequestSpec& spec) {
    try {
      engine.validate(spec);
    } catch (const Error& e) {
      throw bad_request(e.what(), path == "/v1/completions" ? "prompt" : "messages");
    }
  };
  const RequestContext request_context{*tokenizer_,
                                       options_.served_model_name,
                                       engine.model_config().vocab_size,
                                       engine.max_sequence_tokens(),
                                       engine.model_config().eos_token_ids,
                                       options_.limits,
                                       [this] { return seeds_.next(); },
                                       grammars_.get(),
                                       engine.model_config().family == ModelFamily::deepseek_v3};
  const JobContext job_context{engine, *tokenizer_, admission_, options_.served_model_name,
                               [this, path](unsigned status) { count(path, status); }};
  auto reply_error = [&](const ApiError& e) {
    if (holds_render_place) admission_->release();
    std::vector<std::pair<std::string, std::string>> headers;
    if (e.status() == 429) headers.emplace_back("Retry-After", "1");
    respond_json(*channel, e.status(), e.to_json(), std::move(headers));
    count(path, e.status());
  };
  try {
    if (draining_) throw ApiError(503, "the server is shutting down", "server_error");
    if (path == "/tokenize" || path == "/detokenize") {
      const json answer = path == "/tokenize" ? tokenize_response(request.body(), request_context)
                                              : detokenize_response(request.body(), request_context);
      holds_render_place = false;
      admission_->release();
      respond_json(*channel, 200, answer);
      count(path, 200);
    } else if (path == "/v1/completions") {
      CompletionRequest completion = completion_request(request.body(), request_context);
      for (const RequestSpec& spec : completion.specs) validate(spec);
      admit(completion.specs.size());
      start_completion_job(job_context, channel, std::move(completion));
    } else if (path == "/v1/chat/completions") {
      AssistantRequest assistant = chat_request(request.body(), request_context);
      validate(assistant.spec);
      admit(static_cast<size_t>(assistant.n));
      start_assistant_job(job_context, channel, AssistantApi::chat, std::move(assistant));
    } else {
      ResponsesTurn turn = responses_turn(request.body(), *responses_, options_.limits.json_depth);
      AssistantRequest assistant = responses_request(turn.body, request_context);
      validate(assistant.spec);
      admit(1);
      std::function<void(const json&)> keep;
      if (turn.store)
        keep = [store = responses_, conversation = std::move(turn.conversation)](const json& response) {
          json items = conversation;
          for (const json& item : response["output"]) items.push_back(item);
          store->put(response["id"].get<std::string>(), {response, std::move(items)});
        };
      start_assistant_job(job_context, channel, AssistantApi::responses, std::move(assistant), std::move(keep));
    }
  } catch (const ApiError& e) {
    reply_error(e);
  } catch (const Error& e) {
    // The engine refused a submission: it is shutting down.
    reply_error(ApiError(503, e.what(), "server_error"));
  } catch (const std::exception& e) {
    // A bug, not the client's fault; still an answer, never a lost request.
    reply_error(ApiError(500, fmt::format("internal error: {}", e.what()), "server_error"));
  }
}

void OpenAiServer::shutdown() {
  if (draining_.exchange(true)) return;
  // While the requests in flight finish, the listener stays open: new requests and /health answer 503, so a load
  // balancer takes this replica out and sends them elsewhere (HAProxy retries a 503), where closing it at once would
  // reset the connections already waiting in the kernel's backlog, requests no balancer may safely send again.
  // Requests still queued for rendering answer 503 (draining); those rendering finish and reach the engine.
  render_pool_.stop();
  if (const auto engine = engine_.load()) engine->drain(options_.drain_timeout);
  http_.stop_accepting();
  // Every request has delivered its final event; give their last bytes a moment to reach the sockets.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (http_.open_connections() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  http_.stop();
}

void OpenAiServer::serve_until_signal() {
  boost::asio::io_context signals_ioc;
  boost::asio::signal_set signals(signals_ioc, SIGINT, SIGTERM);
  signals.async_wait([](const boost::system::error_code&, int) {});
  signals_ioc.run();  // returns once a signal has arrived
  shutdown();
}

}  // namespace moeserve::server
