#include "server/openai_server.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <boost/asio/signal_set.hpp>
#include <ctime>
#include <random>

#include "harmony/completion.h"
#include "harmony/render.h"
#include "server/api_error.h"
#include "server/assistant_stream.h"
#include "server/conversation.h"
#include "server/r1_conversation.h"
#include "server/request_fields.h"
#include "tokenizer/incremental_decoder.h"
#include "util/error.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

void respond_json(ResponseChannel& channel, unsigned status, const json& body,
                  std::vector<std::pair<std::string, std::string>> headers = {}) {
  channel.respond(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace), std::move(headers));
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The engine request behind one answer. Cancellation may come before the engine has assigned the id (the
// first events can also arrive before submit() returns), so both are tracked under one lock.
class EngineJob {
 public:
  void submit(Engine& engine, RequestSpec spec, EventCallback on_event) {
    const uint64_t id = engine.submit(std::move(spec), std::move(on_event));
    std::lock_guard lock(mutex_);
    id_ = id;
    if (cancel_wanted_) engine.cancel(id);
  }
  void cancel(Engine& engine) {
    std::lock_guard lock(mutex_);
    cancel_wanted_ = true;
    if (id_) engine.cancel(*id_);
  }

 private:
  std::mutex mutex_;
  std::optional<uint64_t> id_;
  bool cancel_wanted_ = false;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  json chat() const {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"completion_tokens_details", {{"reasoning_tokens", reasoning_tokens}}}};
  }
  json responses() const {
    return {{"input_tokens", prompt_tokens},
            {"output_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}}};
  }
};

// Everything a handler needs from the server.
struct Context {
  OpenAiServer& server;
  Engine& engine;
  const Tokenizer& tokenizer;
  const ServerOptions& options;
  std::string route;
};

json parse_body(const HttpRequest& request) {
  json body = json::parse(request.body(), nullptr, false);
  if (body.is_discarded()) throw bad_request("the request body is not valid JSON");
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  return body;
}

void check_model(const json& body, const ServerOptions& options) {
  const auto model = optional_string(body, "model");
  if (!model) throw bad_request("'model' is required", "model");
  if (*model != options.served_model_name)
    throw ApiError(404, fmt::format("The model '{}' does not exist (this server serves '{}')", *model,
                                    options.served_model_name),
                   "invalid_request_error", "model", "model_not_found");
}

// max_tokens (or max_completion_tokens / max_output_tokens) against what the context and KV pool allow.
int max_new_tokens(const json& body, const Context& ctx, size_t prompt_tokens, std::initializer_list<const char*> fields,
                   int64_t default_cap) {
  const int64_t room = ctx.engine.max_sequence_tokens() - static_cast<int64_t>(prompt_tokens);
  if (room < 1)
    throw bad_request(fmt::format("the prompt has {} tokens; this server's limit for prompt plus output is {}",
                                  prompt_tokens, ctx.engine.max_sequence_tokens()),
                      "messages");
  for (const char* field : fields) {
    if (auto v = optional_int(body, field, 1, INT32_MAX)) {
      if (*v > room)
        throw bad_request(fmt::format("'{}' is {}, but the {}-token prompt leaves room for {} (limit {})", field, *v,
                                      prompt_tokens, room, ctx.engine.max_sequence_tokens()),
                          field);
      return static_cast<int>(*v);
    }
  }
  return static_cast<int>(std::min(room, default_cap));
}

void check_n(const json& body) {
  if (auto n = optional_int(body, "n", 1, 128); n && *n != 1)
    throw bad_request("only n = 1 is supported", "n");
}

// ---------------------------------------------------------------------------------------------- chat / responses

// A chat completion or a Responses API response: Harmony in, Harmony out through AssistantStream.
class AssistantJob : public std::enable_shared_from_this<AssistantJob> {
 public:
  enum class Api { chat, responses };

  AssistantJob(Context ctx, std::shared_ptr<ResponseChannel> channel, Api api, bool stream, bool include_usage,
               std::vector<std::string> stops, bool r1 = false)
      : ctx_(std::move(ctx)),
        channel_(std::move(channel)),
        api_(api),
        stream_(stream),
        include_usage_(include_usage),
        assistant_(r1 ? AssistantStream(ctx_.tokenizer, std::move(stops), AssistantStream::R1Reply{})
                      : AssistantStream(ctx_.tokenizer, std::move(stops))),
        id_(random_id(api == Api::chat ? "chatcmpl-" : "resp_")),
        message_id_(random_id("msg_")),
        reasoning_id_(random_id("rs_")),
        created_(unix_now()) {}

  void start(RequestSpec spec) {
    usage_.prompt_tokens = static_cast<int64_t>(spec.prompt.size());
    auto self = shared_from_this();
    channel_->on_disconnect([self] { self->job_.cancel(self->ctx_.engine); });
    if (stream_) {
      channel_->start_events();
      if (api_ == Api::chat) {
        send_chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
      } else {
        send_response_event("response.created", {{"response", response_object("in_progress")}});
      }
    }
    job_.submit(ctx_.engine, std::move(spec), [self](const RequestEvent& e) { self->on_event(e); });
  }

 private:
  void on_event(const RequestEvent& e) {
    if (finished_) return;
    for (TokenId t : e.tokens) {
      ++usage_.completion_tokens;
      last_token_ = t;
      emit(assistant_.push(t));
      if (assistant_.stop_string_hit()) {
        job_.cancel(ctx_.engine);
        finish("stop", {});
        return;
      }
    }
    if (e.finish == FinishReason::none) return;
    emit(assistant_.finish());
    if (e.finish == FinishReason::cancelled) {
      // The client is gone (the channel drops what is sent), or the server is draining.
      finished_ = true;
      if (stream_)
        channel_->finish_events();
      else
        respond_json(*channel_, 503, ApiError(503, "the request was cancelled: the server is shutting down", "server_error").to_json());
      return;
    }
    if (e.finish == FinishReason::error) {
      finish("error", e.error);
      return;
    }
    const bool tool_call = last_token_ == harmony::assistant_stop_tokens().back() && !assistant_.tool_calls().empty();
    finish(e.finish == FinishReason::length ? "length" : (tool_call ? "tool_calls" : "stop"), {});
  }

  void emit(const AssistantDelta& d) {
    if (!stream_ || d.empty()) return;
    if (api_ == Api::chat) {
      if (!d.reasoning.empty()) send_chunk({{"reasoning_content", d.reasoning}}, nullptr);
      if (!d.content.empty()) send_chunk({{"content", d.content}}, nullptr);
      if (d.tool_index) {
        const ToolCall& call = assistant_.tool_calls()[*d.tool_index];
        json entry = {{"index", *d.tool_index}, {"function", {{"arguments", d.tool_arguments}}}};
        if (d.tool_started) {
          entry["id"] = call.id;
          entry["type"] = "function";
          entry["function"]["name"] = call.name;
        }
        send_chunk({{"tool_calls", json::array({entry})}}, nullptr);
      }
      return;
    }
    if (!d.reasoning.empty())
      send_response_event("response.reasoning_text.delta",
                          {{"item_id", reasoning_id_}, {"output_index", 0}, {"content_index", 0}, {"delta", d.reasoning}});
    if (!d.content.empty())
      send_response_event("response.output_text.delta",
                          {{"item_id", message_id_}, {"output_index", 0}, {"content_index", 0}, {"delta", d.content}});
    if (d.tool_index && !d.tool_arguments.empty())
      send_response_event("response.function_call_arguments.delta",
                          {{"item_id", assistant_.tool_calls()[*d.tool_index].id},
                           {"output_index", *d.tool_index},
                           {"delta", d.tool_arguments}});
  }

  void send_chunk(json delta, json finish_reason) {
    json chunk = {{"id", id_},
                  {"object", "chat.completion.chunk"},
                  {"created", created_},
                  {"model", ctx_.options.served_model_name},
                  {"choices", json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                                            {"finish_reason", std::move(finish_reason)}}})}};
    channel_->event(dump(chunk));
  }

  void send_response_event(const char* type, json fields) {
    fields["type"] = type;
    fields["sequence_number"] = sequence_++;
    channel_->event(dump(fields), type);
  }

  json chat_message() const {
    json message = {{"role", "assistant"},
                    {"content", assistant_.content().empty() && !assistant_.tool_calls().empty()
                                    ? json(nullptr)
                                    : json(assistant_.content())}};
    if (!assistant_.reasoning().empty()) message["reasoning_content"] = assistant_.reasoning();
    if (!assistant_.tool_calls().empty()) {
      json calls = json::array();
      for (const auto& c : assistant_.tool_calls())
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      message["tool_calls"] = calls;
    }
    return message;
  }

  json response_object(const std::string& status) const {
    json output = json::array();
    if (!assistant_.reasoning().empty())
      output.push_back({{"type", "reasoning"},
                        {"id", reasoning_id_},
                        {"summary", json::array()},
                        {"content", json::array({{{"type", "reasoning_text"}, {"text", assistant_.reasoning()}}})}});
    if (!assistant_.content().empty() || (status != "in_progress" && assistant_.tool_calls().empty()))
      output.push_back({{"type", "message"},
                        {"id", message_id_},
                        {"status", status == "in_progress" ? "in_progress" : "completed"},
                        {"role", "assistant"},
                        {"content", json::array({{{"type", "output_text"}, {"text", assistant_.content()},
                                                  {"annotations", json::array()}}})}});
    for (const auto& c : assistant_.tool_calls())
      output.push_back({{"type", "function_call"}, {"id", c.id}, {"call_id", c.id}, {"name", c.name},
                        {"arguments", c.arguments}, {"status", "completed"}});
    json r = {{"id", id_},     {"object", "response"},  {"created_at", created_},
              {"status", status}, {"model", ctx_.options.served_model_name}, {"output", output},
              {"incomplete_details", nullptr}};
    if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (status != "in_progress") {
      Usage u = usage_;
      u.reasoning_tokens = assistant_.reasoning_tokens();
      r["usage"] = u.responses();
    }
    return r;
  }

  void finish(const std::string& reason, const std::string& error) {
    finished_ = true;
    if (reason == "error") {
      ApiError failure(500, "generation failed: " + error, "server_error");
      if (stream_) {
        channel_->event(dump(failure.to_json()));
        if (api_ == Api::chat) channel_->event("[DONE]");
        channel_->finish_events();
      } else {
        respond_json(*channel_, 500, failure.to_json());
      }
      ctx_.server.count(ctx_.route, 500);
      return;
    }
    Usage u = usage_;
    u.reasoning_tokens = assistant_.reasoning_tokens();
    if (api_ == Api::chat) {
      if (stream_) {
        send_chunk(json::object(), reason);
        if (include_usage_)
          channel_->event(dump({{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_},
                                {"model", ctx_.options.served_model_name}, {"choices", json::array()},
                                {"usage", u.chat()}}));
        channel_->event("[DONE]");
        channel_->finish_events();
      } else {
        respond_json(*channel_, 200,
                     {{"id", id_}, {"object", "chat.completion"}, {"created", created_},
                      {"model", ctx_.options.served_model_name},
                      {"choices", json::array({{{"index", 0}, {"message", chat_message()}, {"logprobs", nullptr},
                                                {"finish_reason", reason}}})},
                      {"usage", u.chat()}});
      }
    } else {
      const json response = response_object(reason == "length" ? "incomplete" : "completed");
      if (stream_) {
        send_response_event("response.completed", {{"response", response}});
        channel_->finish_events();
      } else {
        respond_json(*channel_, 200, response);
      }
    }
    ctx_.server.count(ctx_.route, 200);
  }

  Context ctx_;
  std::shared_ptr<ResponseChannel> channel_;
  Api api_;
  bool stream_;
  bool include_usage_;
  AssistantStream assistant_;
  EngineJob job_;
  Usage usage_;
  TokenId last_token_ = -1;
  bool finished_ = false;
  int64_t sequence_ = 0;
  std::string id_, message_id_, reasoning_id_;
  int64_t created_;
};

void chat_completions(const Context& ctx, const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) {
  const json body = parse_body(request);
  check_model(body, ctx.options);
  check_n(body);
  if (optional_bool(body, "logprobs").value_or(false)) throw bad_request("logprobs are not supported", "logprobs");
  // DeepSeek-R1 models: R1's chat template, replies read as reasoning then content, stopping at end of sentence.
  const bool r1 = ctx.engine.model_config().family == ModelFamily::deepseek_v3;
  RequestSpec spec;
  if (r1) {
    spec.prompt = chat::render_r1_prompt(ctx.tokenizer, r1_chat_turns(body));
    spec.stop_tokens = ctx.engine.model_config().eos_token_ids;
  } else {
    spec.prompt = harmony::render_conversation_for_completion(ctx.tokenizer, chat_conversation(body).conversation);
    spec.stop_tokens = harmony::assistant_stop_tokens();
  }
  spec.sampling = sampling_params(body);
  spec.max_tokens = max_new_tokens(body, ctx, spec.prompt.size(), {"max_completion_tokens", "max_tokens"}, INT32_MAX);
  const bool stream = optional_bool(body, "stream").value_or(false);
  bool include_usage = false;
  if (body.contains("stream_options") && body["stream_options"].is_object())
    include_usage = optional_bool(body["stream_options"], "include_usage").value_or(false);
  auto job = std::make_shared<AssistantJob>(ctx, std::move(channel), AssistantJob::Api::chat, stream, include_usage,
                                            stop_strings(body), r1);
  job->start(std::move(spec));
}

void responses(const Context& ctx, const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) {
  const json body = parse_body(request);
  check_model(body, ctx.options);
  if (ctx.engine.model_config().family == ModelFamily::deepseek_v3)
    throw bad_request("the Responses API is served for gpt-oss models; DeepSeek-R1 answers /v1/chat/completions");
  const ConversationRequest conv = responses_conversation(body);
  RequestSpec spec;
  spec.prompt = harmony::render_conversation_for_completion(ctx.tokenizer, conv.conversation);
  spec.sampling = sampling_params(body);
  spec.max_tokens = max_new_tokens(body, ctx, spec.prompt.size(), {"max_output_tokens"}, INT32_MAX);
  spec.stop_tokens = harmony::assistant_stop_tokens();
  auto job = std::make_shared<AssistantJob>(ctx, std::move(channel), AssistantJob::Api::responses,
                                            optional_bool(body, "stream").value_or(false), false, std::vector<std::string>{});
  job->start(std::move(spec));
}

// -------------------------------------------------------------------------------------------------- completions

// A /v1/completions request: one engine request per prompt, raw text out (no Harmony parsing), plus the
// generated token ids as the extension field "token_ids" on every choice (MLPerf needs the ids).
class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(Context ctx, std::shared_ptr<ResponseChannel> channel, bool stream, bool include_usage,
                std::vector<std::string> stops, size_t prompts)
      : ctx_(std::move(ctx)), channel_(std::move(channel)), stream_(stream), include_usage_(include_usage),
        stops_(std::move(stops)), choices_(prompts), id_(random_id("cmpl-")), created_(unix_now()) {
    for (auto& c : choices_) c.decoder.emplace(ctx_.tokenizer);
  }

  void start(std::vector<RequestSpec> specs) {
    auto self = shared_from_this();
    channel_->on_disconnect([self] {
      for (auto& c : self->choices_) c.job.cancel(self->ctx_.engine);
    });
    if (stream_) channel_->start_events();
    for (size_t i = 0; i < specs.size(); ++i) {
      usage_.prompt_tokens += static_cast<int64_t>(specs[i].prompt.size());
      choices_[i].job.submit(ctx_.engine, std::move(specs[i]), [self, i](const RequestEvent& e) { self->on_event(i, e); });
    }
  }

 private:
  struct Choice {
    EngineJob job;
    std::optional<IncrementalDecoder> decoder;
    std::string text;
    std::string held;  // text that may be the start of a stop string
    std::vector<TokenId> token_ids;
    std::optional<std::string> finish_reason;
  };

  // Appends text, cutting at the first complete stop string; returns the text released now.
  std::string add_text(Choice& c, const std::string& more, bool flush) {
    c.held += more;
    size_t cut = std::string::npos;
    for (const auto& s : stops_) cut = std::min(cut, c.held.find(s));
    std::string out;
    if (cut != std::string::npos) {
      out = c.held.substr(0, cut);
      c.held.clear();
      c.finish_reason = "stop";
    } else {
      size_t keep = 0;
      if (!flush)
        for (const auto& s : stops_)
          for (size_t n = std::min(s.size() - 1, c.held.size()); n > keep; --n)
            if (c.held.compare(c.held.size() - n, n, s, 0, n) == 0) {
              keep = n;
              break;
            }
      out = c.held.substr(0, c.held.size() - keep);
      c.held.erase(0, c.held.size() - keep);
    }
    c.text += out;
    return out;
  }

  void on_event(size_t index, const RequestEvent& e) {
    std::lock_guard lock(mutex_);
    Choice& c = choices_[index];
    if (c.finish_reason) return;
    std::string released;
    std::vector<TokenId> new_ids;
    for (TokenId t : e.tokens) {
      c.token_ids.push_back(t);
      new_ids.push_back(t);
      ++usage_.completion_tokens;
      released += add_text(c, c.decoder->push(t), false);
      if (c.finish_reason) {
        c.job.cancel(ctx_.engine);
        break;
      }
    }
    if (!c.finish_reason && e.finish != FinishReason::none) {
      released += add_text(c, c.decoder->finish(), true);
      if (!c.finish_reason)
        c.finish_reason = e.finish == FinishReason::length  ? "length"
                          : e.finish == FinishReason::stop  ? "stop"
                          : e.finish == FinishReason::error ? "error"
                                                            : "cancelled";
      if (e.finish == FinishReason::error) error_ = e.error;
    }
    if (stream_ && (!released.empty() || !new_ids.empty() || c.finish_reason))
      channel_->event(dump(chunk(index, released, new_ids, c.finish_reason)));
    if (c.finish_reason && ++finished_ == choices_.size()) complete();
  }

  json chunk(size_t index, const std::string& text, const std::vector<TokenId>& ids,
             const std::optional<std::string>& finish) const {
    return {{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", ctx_.options.served_model_name},
            {"choices", json::array({{{"index", index}, {"text", text}, {"token_ids", ids}, {"logprobs", nullptr},
                                      {"finish_reason", finish ? json(*finish) : json(nullptr)}}})}};
  }

  json usage() const {
    return {{"prompt_tokens", usage_.prompt_tokens},
            {"completion_tokens", usage_.completion_tokens},
            {"total_tokens", usage_.prompt_tokens + usage_.completion_tokens}};
  }

  void complete() {
    const bool cancelled = std::any_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finish_reason == "cancelled"; });
    if (!error_.empty()) {
      ApiError failure(500, "generation failed: " + error_, "server_error");
      if (stream_) {
        channel_->event(dump(failure.to_json()));
        channel_->event("[DONE]");
        channel_->finish_events();
      } else {
        respond_json(*channel_, 500, failure.to_json());
      }
      ctx_.server.count(ctx_.route, 500);
      return;
    }
    if (stream_) {
      if (include_usage_ && !cancelled)
        channel_->event(dump({{"id", id_}, {"object", "text_completion"}, {"created", created_},
                              {"model", ctx_.options.served_model_name}, {"choices", json::array()}, {"usage", usage()}}));
      if (!cancelled) channel_->event("[DONE]");
      channel_->finish_events();
    } else if (cancelled) {
      respond_json(*channel_, 503, ApiError(503, "the request was cancelled: the server is shutting down", "server_error").to_json());
    } else {
      json choices = json::array();
      for (size_t i = 0; i < choices_.size(); ++i)
        choices.push_back({{"index", i}, {"text", choices_[i].text}, {"token_ids", choices_[i].token_ids},
                           {"logprobs", nullptr}, {"finish_reason", *choices_[i].finish_reason}});
      respond_json(*channel_, 200, {{"id", id_}, {"object", "text_completion"}, {"created", created_},
                                    {"model", ctx_.options.served_model_name}, {"choices", choices}, {"usage", usage()}});
    }
    if (!cancelled) ctx_.server.count(ctx_.route, 200);
  }

  Context ctx_;
  std::shared_ptr<ResponseChannel> channel_;
  bool stream_;
  bool include_usage_;
  std::vector<std::string> stops_;
  std::mutex mutex_;
  std::vector<Choice> choices_;
  size_t finished_ = 0;
  Usage usage_;
  std::string error_;
  std::string id_;
  int64_t created_;
};

// "prompt": a string, a list of token ids, or a list of either (a batch).
std::vector<std::vector<TokenId>> completion_prompts(const json& body, const Tokenizer& tokenizer) {
  if (!body.contains("prompt")) throw bad_request("'prompt' is required", "prompt");
  const json& p = body["prompt"];
  auto one = [&](const json& item) -> std::vector<TokenId> {
    if (item.is_string()) {
      try {
        return tokenizer.encode(item.get<std::string>(), AllowedSpecial::all());
      } catch (const Error& e) {
        throw bad_request(fmt::format("the prompt cannot be tokenized: {}", e.what()), "prompt");
      }
    }
    if (item.is_array()) {
      std::vector<TokenId> ids;
      for (const auto& t : item) {
        if (!t.is_number_integer()) throw bad_request("a token-id prompt must hold integers only", "prompt");
        ids.push_back(t.get<TokenId>());
      }
      return ids;
    }
    throw bad_request("'prompt' must be a string, a list of token ids, or a list of those", "prompt");
  };
  if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) {
    std::vector<std::vector<TokenId>> prompts;
    for (const auto& item : p) prompts.push_back(one(item));
    return prompts;
  }
  return {one(p)};
}

void completions(const Context& ctx, const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) {
  const json body = parse_body(request);
  check_model(body, ctx.options);
  check_n(body);
  if (body.contains("logprobs") && !body["logprobs"].is_null()) throw bad_request("logprobs are not supported", "logprobs");
  if (optional_bool(body, "echo").value_or(false)) throw bad_request("echo is not supported", "echo");
  const auto prompts = completion_prompts(body, ctx.tokenizer);
  const bool ignore_eos = optional_bool(body, "ignore_eos").value_or(false);  // vLLM's extension, for benchmarks
  std::vector<RequestSpec> specs;
  for (const auto& prompt : prompts) {
    if (prompt.empty()) throw bad_request("the prompt is empty", "prompt");
    RequestSpec spec;
    spec.prompt = prompt;
    spec.sampling = sampling_params(body);
    // OpenAI's default for /v1/completions is 16 tokens.
    spec.max_tokens = max_new_tokens(body, ctx, prompt.size(), {"max_tokens"}, 16);
    if (!ignore_eos) spec.stop_tokens = ctx.engine.model_config().eos_token_ids;
    try {
      ctx.engine.validate(spec);
    } catch (const Error& e) {
      throw bad_request(e.what(), "prompt");
    }
    specs.push_back(std::move(spec));
  }
  bool include_usage = false;
  if (body.contains("stream_options") && body["stream_options"].is_object())
    include_usage = optional_bool(body["stream_options"], "include_usage").value_or(false);
  auto job = std::make_shared<CompletionJob>(ctx, std::move(channel), optional_bool(body, "stream").value_or(false),
                                             include_usage, stop_strings(body), specs.size());
  job->start(std::move(specs));
}

}  // namespace

OpenAiServer::OpenAiServer(std::shared_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tokenizer,
                           ServerOptions options)
    : engine_(std::move(engine)),
      tokenizer_(std::move(tokenizer)),
      options_(std::move(options)),
      http_(options_.http, [this](HttpRequest r, std::shared_ptr<ResponseChannel> c) { handle(std::move(r), std::move(c)); }) {}

OpenAiServer::~OpenAiServer() { http_.stop(); }

void OpenAiServer::start() { http_.start(); }

void OpenAiServer::count(const std::string& route, unsigned status) {
  std::lock_guard lock(stats_mutex_);
  ++counts_.by_route_status[{route, status}];
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
    if (path == "/health") {
      if (draining_) throw ApiError(503, "the server is shutting down", "server_error");
      channel->respond(200, "application/json", R"({"status":"ok"})");
      count(path, 200);
      return;
    }
    if (path == "/metrics") {
      const EngineMetrics m = engine_->metrics();
      double rate = 0;
      std::string text;
      {
        std::lock_guard lock(stats_mutex_);
        const auto now = std::chrono::steady_clock::now();
        const double seconds = std::chrono::duration<double>(now - last_scrape_).count();
        if (seconds > 0) rate = static_cast<double>(m.generated_tokens - last_scrape_tokens_) / seconds;
        last_scrape_ = now;
        last_scrape_tokens_ = m.generated_tokens;
        text = render_prometheus(m, counts_, rate);
      }
      channel->respond(200, "text/plain; version=0.0.4", std::move(text));
      count(path, 200);
      return;
    }
    if (path.rfind("/v1/", 0) == 0 && options_.api_key) {
      const auto auth = request[http::field::authorization];
      if (auth != "Bearer " + *options_.api_key)
        throw ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "incorrect API key",
                       "invalid_request_error", std::nullopt, "invalid_api_key");
    }
    if (path == "/v1/models") {
      const json model = {{"id", options_.served_model_name}, {"object", "model"}, {"created", unix_now()},
                          {"owned_by", "moeserve"}, {"max_model_len", engine_->max_sequence_tokens()}};
      respond_json(*channel, 200, {{"object", "list"}, {"data", json::array({model})}});
      count(path, 200);
      return;
    }
    using Endpoint = void (*)(const Context&, const HttpRequest&, std::shared_ptr<ResponseChannel>);
    Endpoint endpoint = path == "/v1/chat/completions" ? chat_completions
                        : path == "/v1/completions"    ? completions
                        : path == "/v1/responses"      ? responses
                                                       : nullptr;
    if (endpoint == nullptr) throw ApiError(404, fmt::format("no route for {}", path), "invalid_request_error");
    if (!is_post) throw ApiError(405, fmt::format("{} takes POST", path), "invalid_request_error");
    if (draining_) throw ApiError(503, "the server is shutting down", "server_error");
    if (engine_->in_flight() >= options_.max_in_flight) {
      reply_error(ApiError(429, fmt::format("the server is at its limit of {} requests in flight; retry shortly",
                                            options_.max_in_flight),
                           "rate_limit_error"),
                  {{"Retry-After", "1"}});
      return;
    }
    endpoint(Context{*this, *engine_, *tokenizer_, options_, path}, request, channel);
  } catch (const ApiError& e) {
    reply_error(e);
  } catch (const Error& e) {
    // The engine refused the request (it can never run): the client's error, named.
    reply_error(bad_request(e.what()));
  }
}

void OpenAiServer::shutdown() {
  if (draining_.exchange(true)) return;
  http_.stop_accepting();
  engine_->drain(options_.drain_timeout);
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
