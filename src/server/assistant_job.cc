#include "server/assistant_job.h"

#include "harmony/completion.h"
#include "server/api_error.h"
#include "server/assistant_stream.h"
#include "server/logprobs_json.h"
#include "server/response_items.h"

#include <mutex>
#include <optional>
#include <utility>

namespace moeserve::server {

using nlohmann::json;

namespace {

// A chat completion or a Responses API response: Harmony in, Harmony out through AssistantStream. Chat may ask
// for n choices, each its own engine request and reader, answered together (streamed: chunks by index).
class AssistantJob : public std::enable_shared_from_this<AssistantJob> {
 public:
  using Api = AssistantApi;

  AssistantJob(JobContext ctx, std::shared_ptr<ResponseChannel> channel, Api api, const AssistantRequest& request,
               std::function<void(const json&)> keep)
      : ctx_(std::move(ctx)),
        channel_(std::move(channel)),
        api_(api),
        stream_(request.stream),
        include_usage_(request.include_usage),
        logprobs_wanted_(request.spec.top_logprobs >= 0),
        stop_tokens_(request.spec.stop_tokens),
        choices_(static_cast<size_t>(request.n)),
        items_(stream_ ? ResponseItems::Emit([this](const char* type, json fields) {
                           send_response_event(type, std::move(fields));
                         })
                       : ResponseItems::Emit()),
        keep_(std::move(keep)),
        id_(random_id(api == Api::chat ? "chatcmpl-" : "resp_")),
        created_(unix_now()) {
    for (Choice& c : choices_)
      c.assistant.emplace(request.r1_reply ? AssistantStream(ctx_.tokenizer, request.stops, AssistantStream::R1Reply{})
                                           : AssistantStream(ctx_.tokenizer, request.stops));
  }

  // Choice 0 goes to the engine at once, the others when it has computed the prompt (its first event), so that
  // they take its KV from the prefix cache: one prefill for n choices, as for completions.
  void start(AssistantRequest request) {
    usage_.prompt_tokens = static_cast<int64_t>(request.spec.prompt.size());
    auto self = shared_from_this();
    channel_->on_disconnect([self] {
      for (Choice& c : self->choices_) c.job.cancel(self->ctx_.engine);
    });
    if (stream_) {
      channel_->start_events();
      if (api_ == Api::chat) {
        for (size_t i = 0; i < choices_.size(); ++i) send_chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr);
      } else {
        const json response = response_object("in_progress");
        send_response_event("response.created", {{"response", response}});
        send_response_event("response.in_progress", {{"response", response}});
      }
    }
    // A forced tool call's header ends the prompt: read as the output's start, it opens the call.
    for (size_t i = 0; i < choices_.size(); ++i)
      for (TokenId t : request.primed) emit(i, choices_[i].assistant->push(t));
    for (size_t i = 1; i < choices_.size(); ++i) later_.hold(i, nth_choice(request.spec, static_cast<int>(i)));
    try {
      submit(0, std::move(request.spec));
    } catch (...) {
      // Refused (the engine is stopping): the places taken for the later choices are freed too.
      for (size_t i = 1; i < choices_.size(); ++i) ctx_.admission->release();
      throw;
    }
  }

 private:
  struct Choice {
    std::optional<AssistantStream> assistant;
    EngineJob job;
    int64_t completion_tokens = 0;
    TokenId last_token = -1;
    std::vector<TokenLogprobs> logprobs;
    std::optional<std::string> finish_reason;
  };

  void submit(size_t index, RequestSpec spec) {
    auto self = shared_from_this();
    choices_[index].job.submit(ctx_, std::move(spec),
                               [self, index](const RequestEvent& e) { self->on_event(index, e); });
  }

  // On the engine thread, under mutex_. One the engine refuses (it is stopping) fails the answer.
  void submit_later_choices() {
    later_.release([this](size_t i, RequestSpec spec) { submit(i, std::move(spec)); },
                   [this](size_t, const char* error) {
                     if (!answered_) fail(error);
                   });
  }

  void on_event(size_t index, const RequestEvent& e) {
    std::lock_guard lock(mutex_);
    if (index == 0) submit_later_choices();
    Choice& c = choices_[index];
    if (answered_ || c.finish_reason) return;
    for (size_t k = 0; k < e.tokens.size(); ++k) {
      const TokenId t = e.tokens[k];
      ++c.completion_tokens;
      c.last_token = t;
      json token_logprobs = nullptr;
      if (logprobs_wanted_ && k < e.logprobs.size()) {
        c.logprobs.push_back(e.logprobs[k]);
        token_logprobs = chat_logprobs(ctx_.tokenizer, std::span(&e.logprobs[k], 1));
      }
      // The stop token that ended the request is not text (answer_job.h); a special one (an end of sequence,
      // Harmony's <|return|> or <|call|>) has none anyway and goes to the reader, which reads the reply's shape
      // from it.
      const bool text_dropped = ends_on_stop_token(e, k, stop_tokens_) && !ctx_.tokenizer.is_special(t);
      emit(index, text_dropped ? AssistantDelta{} : c.assistant->push(t), std::move(token_logprobs));
      if (c.assistant->stop_string_hit()) {
        c.job.cancel(ctx_.engine);
        finish_choice(index, "stop");
        return;
      }
    }
    if (e.finish == FinishReason::none) return;
    emit(index, c.assistant->finish());
    if (e.finish == FinishReason::cancelled) {
      // The client is gone (the channel drops what is sent), or the server is draining.
      answer_cancelled();
      return;
    }
    if (e.finish == FinishReason::error) {
      fail(e.error);
      return;
    }
    const bool tool_call =
        c.last_token == harmony::assistant_stop_tokens().back() && !c.assistant->tool_calls().empty();
    finish_choice(index, e.finish == FinishReason::length ? "length" : (tool_call ? "tool_calls" : "stop"));
  }

  // logprobs (chat only): the token's, sent with the first chunk of its delta, or alone when it has none.
  void emit(size_t index, const AssistantDelta& d, json logprobs = nullptr) {
    const AssistantStream& assistant = *choices_[index].assistant;
    if (api_ == Api::responses) {
      if (!d.empty()) items_.push(d, assistant.tool_calls());  // non-streaming too: the items make the answer's output
      return;
    }
    if (!stream_) return;
    if (d.empty()) {
      if (!logprobs.is_null()) send_chunk(index, json::object(), nullptr, std::move(logprobs));
      return;
    }
    if (!d.reasoning.empty())
      send_chunk(index, {{"reasoning_content", d.reasoning}}, nullptr, std::exchange(logprobs, nullptr));
    if (!d.content.empty()) send_chunk(index, {{"content", d.content}}, nullptr, std::exchange(logprobs, nullptr));
    if (d.tool_index) {
      const ToolCall& call = assistant.tool_calls()[*d.tool_index];
      json entry = {{"index", *d.tool_index}, {"function", {{"arguments", d.tool_arguments}}}};
      if (d.tool_started) {
        entry["id"] = call.id;
        entry["type"] = "function";
        entry["function"]["name"] = call.name;
      }
      send_chunk(index, {{"tool_calls", json::array({entry})}}, nullptr, std::exchange(logprobs, nullptr));
    }
  }

  void send_chunk(size_t index, json delta, json finish_reason, json logprobs = nullptr) {
    json chunk = {{"id", id_},
                  {"object", "chat.completion.chunk"},
                  {"created", created_},
                  {"model", ctx_.served_model_name},
                  {"choices", json::array({{{"index", index}, {"delta", std::move(delta)},
                                            {"logprobs", std::move(logprobs)},
                                            {"finish_reason", std::move(finish_reason)}}})}};
    channel_->event(dump(chunk));
  }

  void send_response_event(const char* type, json fields) {
    fields["type"] = type;
    fields["sequence_number"] = sequence_++;
    channel_->event(dump(fields), type);
  }

  json chat_message(const AssistantStream& assistant) const {
    json message = {{"role", "assistant"},
                    {"content", assistant.content().empty() && !assistant.tool_calls().empty()
                                    ? json(nullptr)
                                    : json(assistant.content())}};
    if (!assistant.reasoning().empty()) message["reasoning_content"] = assistant.reasoning();
    if (!assistant.tool_calls().empty()) {
      json calls = json::array();
      for (const auto& c : assistant.tool_calls())
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      message["tool_calls"] = calls;
    }
    return message;
  }

  // The prompt once, the completion and reasoning tokens of every choice.
  Usage usage() const {
    Usage u = usage_;
    for (const Choice& c : choices_) {
      u.completion_tokens += c.completion_tokens;
      u.reasoning_tokens += c.assistant->reasoning_tokens();
    }
    return u;
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
    if (status != "in_progress") r["usage"] = usage().responses();
    return r;
  }

  // A choice is done (streamed: its last chunk goes now); the answer goes once every choice is.
  void finish_choice(size_t index, const std::string& reason) {
    choices_[index].finish_reason = reason;
    if (stream_ && api_ == Api::chat) send_chunk(index, json::object(), reason);
    if (++finished_ == choices_.size()) answer();
  }

  void answer() {
    answered_ = true;
    const Usage u = usage();
    if (api_ == Api::chat) {
      if (stream_) {
        if (include_usage_)
          channel_->event(dump({{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_},
                                {"model", ctx_.served_model_name}, {"choices", json::array()},
                                {"usage", u.chat()}}));
        channel_->event("[DONE]");
        channel_->finish_events();
      } else {
        json choices = json::array();
        for (size_t i = 0; i < choices_.size(); ++i) {
          const Choice& c = choices_[i];
          choices.push_back({{"index", i}, {"message", chat_message(*c.assistant)},
                             {"logprobs", logprobs_wanted_ ? chat_logprobs(ctx_.tokenizer, c.logprobs) : json(nullptr)},
                             {"finish_reason", *c.finish_reason}});
        }
        respond_json(*channel_, 200,
                     {{"id", id_}, {"object", "chat.completion"}, {"created", created_},
                      {"model", ctx_.served_model_name}, {"choices", std::move(choices)}, {"usage", u.chat()}});
      }
    } else {
      const bool cut_off = choices_.front().finish_reason == "length";
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

  // Answered before every choice is done: the others are cancelled (their events are dropped).
  void end_early() {
    answered_ = true;
    for (Choice& c : choices_) c.job.cancel(ctx_.engine);
  }

  void answer_cancelled() {
    end_early();
    if (stream_)
      channel_->finish_events();
    else
      respond_json(*channel_, 503,
                   ApiError(503, "the request was cancelled: the server is shutting down", "server_error").to_json());
  }

  void fail(const std::string& error) {
    end_early();
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
  }

  JobContext ctx_;
  std::shared_ptr<ResponseChannel> channel_;
  Api api_;
  bool stream_;
  bool include_usage_;
  bool logprobs_wanted_;
  std::vector<TokenId> stop_tokens_;  // every choice's
  std::mutex mutex_;
  std::vector<Choice> choices_;
  LaterChoices later_;
  size_t finished_ = 0;
  bool answered_ = false;
  ResponseItems items_;  // the Responses API's output items (unused for chat)
  std::function<void(const json&)> keep_;
  Usage usage_;  // the prompt's tokens; the choices count their own
  int64_t sequence_ = 0;
  std::string id_;
  int64_t created_;
};

}  // namespace

void start_assistant_job(JobContext ctx, std::shared_ptr<ResponseChannel> channel, AssistantApi api,
                         AssistantRequest request, std::function<void(const json&)> keep) {
  auto job = std::make_shared<AssistantJob>(std::move(ctx), std::move(channel), api, request, std::move(keep));
  job->start(std::move(request));
}

}  // namespace moeserve::server
