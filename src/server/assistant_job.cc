#include "server/assistant_job.h"

#include "harmony/completion.h"
#include "server/api_error.h"
#include "server/assistant_stream.h"
#include "server/logprobs_json.h"
#include "server/response_items.h"

#include <utility>

namespace moeserve::server {

using nlohmann::json;

namespace {

// A chat completion or a Responses API response: Harmony in, Harmony out through AssistantStream.
class AssistantJob : public std::enable_shared_from_this<AssistantJob> {
 public:
  using Api = AssistantApi;

  AssistantJob(JobContext ctx, std::shared_ptr<ResponseChannel> channel, Api api, bool stream, bool include_usage,
               std::vector<std::string> stops, bool r1_reply, std::function<void(const json&)> keep)
      : ctx_(std::move(ctx)),
        channel_(std::move(channel)),
        api_(api),
        stream_(stream),
        include_usage_(include_usage),
        assistant_(r1_reply ? AssistantStream(ctx_.tokenizer, std::move(stops), AssistantStream::R1Reply{})
                            : AssistantStream(ctx_.tokenizer, std::move(stops))),
        items_(stream ? ResponseItems::Emit([this](const char* type, json fields) {
                          send_response_event(type, std::move(fields));
                        })
                      : ResponseItems::Emit()),
        keep_(std::move(keep)),
        id_(random_id(api == Api::chat ? "chatcmpl-" : "resp_")),
        created_(unix_now()) {}

  void start(RequestSpec spec, const std::vector<TokenId>& primed) {
    usage_.prompt_tokens = static_cast<int64_t>(spec.prompt.size());
    logprobs_wanted_ = spec.top_logprobs >= 0;
    stop_tokens_ = spec.stop_tokens;
    auto self = shared_from_this();
    channel_->on_disconnect([self] { self->job_.cancel(self->ctx_.engine); });
    if (stream_) {
      channel_->start_events();
      if (api_ == Api::chat) {
        send_chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
      } else {
        const json response = response_object("in_progress");
        send_response_event("response.created", {{"response", response}});
        send_response_event("response.in_progress", {{"response", response}});
      }
    }
    // A forced tool call's header ends the prompt: read as the output's start, it opens the call.
    for (TokenId t : primed) emit(assistant_.push(t));
    job_.submit(ctx_, std::move(spec), [self](const RequestEvent& e) { self->on_event(e); });
  }

 private:
  void on_event(const RequestEvent& e) {
    if (finished_) return;
    for (size_t k = 0; k < e.tokens.size(); ++k) {
      const TokenId t = e.tokens[k];
      ++usage_.completion_tokens;
      last_token_ = t;
      json token_logprobs = nullptr;
      if (logprobs_wanted_ && k < e.logprobs.size()) {
        logprobs_.push_back(e.logprobs[k]);
        token_logprobs = chat_logprobs(ctx_.tokenizer, std::span(&e.logprobs[k], 1));
      }
      // The stop token that ended the request is not text (answer_job.h); a special one (an end of sequence,
      // Harmony's <|return|> or <|call|>) has none anyway and goes to the reader, which reads the reply's shape
      // from it.
      const bool text_dropped = ends_on_stop_token(e, k, stop_tokens_) && !ctx_.tokenizer.is_special(t);
      emit(text_dropped ? AssistantDelta{} : assistant_.push(t), std::move(token_logprobs));
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

  // logprobs (chat only): the token's, sent with the first chunk of its delta, or alone when it has none.
  void emit(const AssistantDelta& d, json logprobs = nullptr) {
    if (api_ == Api::responses) {
      if (!d.empty()) items_.push(d, assistant_.tool_calls());  // non-streaming too: the items make the answer's output
      return;
    }
    if (!stream_) return;
    if (d.empty()) {
      if (!logprobs.is_null()) send_chunk(json::object(), nullptr, std::move(logprobs));
      return;
    }
    if (!d.reasoning.empty()) send_chunk({{"reasoning_content", d.reasoning}}, nullptr, std::exchange(logprobs, nullptr));
    if (!d.content.empty()) send_chunk({{"content", d.content}}, nullptr, std::exchange(logprobs, nullptr));
    if (d.tool_index) {
      const ToolCall& call = assistant_.tool_calls()[*d.tool_index];
      json entry = {{"index", *d.tool_index}, {"function", {{"arguments", d.tool_arguments}}}};
      if (d.tool_started) {
        entry["id"] = call.id;
        entry["type"] = "function";
        entry["function"]["name"] = call.name;
      }
      send_chunk({{"tool_calls", json::array({entry})}}, nullptr, std::exchange(logprobs, nullptr));
    }
  }

  void send_chunk(json delta, json finish_reason, json logprobs = nullptr) {
    json chunk = {{"id", id_},
                  {"object", "chat.completion.chunk"},
                  {"created", created_},
                  {"model", ctx_.served_model_name},
                  {"choices", json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
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

  // A Responses API response object; its output is empty until generation ends (the stream's items carry it).
  json response_object(const std::string& status) const {
    json r = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", status},
              {"model", ctx_.served_model_name},
              {"output", status == "in_progress" ? json::array() : items_.output()},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"usage", nullptr}};
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
      if (stream_ && api_ == Api::responses) {
        json response = response_object("failed");
        response["error"] = {{"code", "server_error"}, {"message", failure.what()}};
        send_response_event("response.failed", {{"response", response}});
        channel_->finish_events();
      } else if (stream_) {
        channel_->event(dump(failure.to_json()));
        if (api_ == Api::chat) channel_->event("[DONE]");
        channel_->finish_events();
      } else {
        respond_json(*channel_, 500, failure.to_json());
      }
      ctx_.count(500);
      return;
    }
    Usage u = usage_;
    u.reasoning_tokens = assistant_.reasoning_tokens();
    if (api_ == Api::chat) {
      if (stream_) {
        send_chunk(json::object(), reason);
        if (include_usage_)
          channel_->event(dump({{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_},
                                {"model", ctx_.served_model_name}, {"choices", json::array()},
                                {"usage", u.chat()}}));
        channel_->event("[DONE]");
        channel_->finish_events();
      } else {
        respond_json(*channel_, 200,
                     {{"id", id_}, {"object", "chat.completion"}, {"created", created_},
                      {"model", ctx_.served_model_name},
                      {"choices", json::array({{{"index", 0}, {"message", chat_message()},
                                                {"logprobs", logprobs_wanted_ ? chat_logprobs(ctx_.tokenizer, logprobs_)
                                                                              : json(nullptr)},
                                                {"finish_reason", reason}}})},
                      {"usage", u.chat()}});
      }
    } else {
      const bool cut_off = reason == "length";
      items_.finish(cut_off);
      const json response = response_object(cut_off ? "incomplete" : "completed");
      if (keep_) keep_(response);
      if (stream_) {
        send_response_event(cut_off ? "response.incomplete" : "response.completed", {{"response", response}});
        channel_->finish_events();
      } else {
        respond_json(*channel_, 200, response);
      }
    }
    ctx_.count(200);
  }

  JobContext ctx_;
  std::shared_ptr<ResponseChannel> channel_;
  Api api_;
  bool stream_;
  bool include_usage_;
  AssistantStream assistant_;
  ResponseItems items_;  // the Responses API's output items (unused for chat)
  std::function<void(const json&)> keep_;
  EngineJob job_;
  Usage usage_;
  TokenId last_token_ = -1;
  bool logprobs_wanted_ = false;
  std::vector<TokenId> stop_tokens_;
  std::vector<TokenLogprobs> logprobs_;
  bool finished_ = false;
  int64_t sequence_ = 0;
  std::string id_;
  int64_t created_;
};

}  // namespace

void start_assistant_job(JobContext ctx, std::shared_ptr<ResponseChannel> channel, AssistantApi api,
                         AssistantRequest request, std::function<void(const json&)> keep) {
  auto job = std::make_shared<AssistantJob>(std::move(ctx), std::move(channel), api, request.stream,
                                            request.include_usage, std::move(request.stops), request.r1_reply,
                                            std::move(keep));
  job->start(std::move(request.spec), request.primed);
}

}  // namespace moeserve::server
