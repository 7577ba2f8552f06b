#include "server/completion_job.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/logprobs_json.h"
#include "server/stop_string_filter.h"
#include "tokenizer/incremental_decoder.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

// A /v1/completions request: one engine request per prompt, raw text out (no Harmony parsing), plus the
// generated token ids as the extension field "token_ids" on every choice (MLPerf needs the ids).
class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(JobContext ctx, std::shared_ptr<ResponseChannel> channel, const CompletionRequest& request)
      : ctx_(std::move(ctx)), channel_(std::move(channel)), stream_(request.stream),
        include_usage_(request.include_usage), echo_(request.echo), n_(static_cast<size_t>(request.n)),
        choices_(request.specs.size()),
        id_(random_id("cmpl-")), created_(unix_now()) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      c.decoder.emplace(ctx_.tokenizer);
      c.stops.emplace(request.stops);
      if (request.specs[i].top_logprobs >= 0) c.logprobs.emplace(ctx_.tokenizer);
      if (echo_) c.prompt = request.specs[i].prompt;
      c.stop_tokens = request.specs[i].stop_tokens;
    }
    later_.resize(choices_.size() / n_);
  }

  // A prompt's first choice goes to the engine at once; its other n - 1 when the first has computed the prompt
  // (its first event), so that they take its KV from the prefix cache: one prefill for n choices.
  void start(std::vector<RequestSpec> specs) {
    auto self = shared_from_this();
    channel_->on_disconnect([self] {
      for (auto& c : self->choices_) c.job.cancel(self->ctx_.engine);
    });
    if (stream_) channel_->start_events();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i % n_ != 0) {
        later_[i / n_].hold(i, std::move(specs[i]));
        continue;
      }
      usage_.prompt_tokens += static_cast<int64_t>(specs[i].prompt.size());
      submit(i, std::move(specs[i]));
    }
  }

 private:
  struct Choice {
    EngineJob job;
    std::optional<IncrementalDecoder> decoder;
    std::optional<StopStringFilter> stops;
    std::string text;
    std::vector<TokenId> token_ids;
    std::optional<std::string> finish_reason;
    std::optional<CompletionLogprobs> logprobs;  // when asked for
    std::vector<TokenId> prompt;                 // echo: sent before the first generated text
    std::vector<TokenId> stop_tokens;            // its request's: the one that ends it is not text
  };

  void submit(size_t index, RequestSpec spec) {
    auto self = shared_from_this();
    choices_[index].job.submit(ctx_, std::move(spec), [self, index](const RequestEvent& e) { self->on_event(index, e); });
  }

  // The first choice of a prompt has its prompt's KV: the others follow (on the engine thread, under mutex_;
  // their events come on later steps). One the engine refuses (it is draining) fails alone.
  void submit_later_choices(size_t first) {
    later_[first / n_].release([this](size_t i, RequestSpec spec) { submit(i, std::move(spec)); },
                               [this](size_t i, const char* error) {
                                 choices_[i].finish_reason = "error";
                                 error_ = error;
                                 ++finished_;
                               });
  }

  // echo: the prompt's text, and its tokens' logprobs (the first has none) when the request gets logprobs.
  std::string echo_prompt(Choice& c, const RequestEvent& e) {
    if (c.logprobs)
      for (size_t i = 0; i < c.prompt.size(); ++i)
        c.logprobs->add(c.prompt[i], i == 0 || e.prompt_logprobs.size() < i ? std::nullopt
                                                                           : std::optional(e.prompt_logprobs[i - 1]));
    std::string text = ctx_.tokenizer.decode(c.prompt);
    c.prompt.clear();
    c.text += text;
    return text;
  }

  // Adds the choice's text; returns what is released now (a complete stop string finishes the choice).
  std::string add_text(Choice& c, const std::string& more, bool last) {
    std::string out = c.stops->push(more);
    if (last && !c.stops->hit()) out += c.stops->flush();
    if (c.stops->hit()) c.finish_reason = "stop";
    c.text += out;
    return out;
  }

  void on_event(size_t index, const RequestEvent& e) {
    std::lock_guard lock(mutex_);
    if (index % n_ == 0) submit_later_choices(index);
    Choice& c = choices_[index];
    if (c.finish_reason) return;
    std::string released = c.prompt.empty() ? std::string() : echo_prompt(c, e);
    std::vector<TokenId> new_ids;
    for (size_t k = 0; k < e.tokens.size(); ++k) {
      const TokenId t = e.tokens[k];
      c.token_ids.push_back(t);
      new_ids.push_back(t);
      if (c.logprobs) c.logprobs->add(t, k < e.logprobs.size() ? std::optional(e.logprobs[k]) : std::nullopt);
      ++usage_.completion_tokens;
      if (!ends_on_stop_token(e, k, c.stop_tokens)) released += add_text(c, c.decoder->push(t), /*last=*/false);
      if (c.finish_reason) {
        c.job.cancel(ctx_.engine);
        break;
      }
    }
    if (!c.finish_reason && e.finish != FinishReason::none) {
      released += add_text(c, c.decoder->finish(), /*last=*/true);
      if (!c.finish_reason)
        c.finish_reason = e.finish == FinishReason::length  ? "length"
                          : e.finish == FinishReason::stop  ? "stop"
                          : e.finish == FinishReason::error ? "error"
                                                            : "cancelled";
      if (e.finish == FinishReason::error) error_ = e.error;
    }
    if (stream_ && (!released.empty() || !new_ids.empty() || c.finish_reason))
      channel_->event(dump(chunk(index, released, new_ids, c.logprobs ? c.logprobs->take() : json(nullptr),
                                 c.finish_reason)));
    if (c.finish_reason && ++finished_ == choices_.size()) complete();
  }

  json chunk(size_t index, const std::string& text, const std::vector<TokenId>& ids, json logprobs,
             const std::optional<std::string>& finish) const {
    return {{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", ctx_.served_model_name},
            {"choices", json::array({{{"index", index}, {"text", text}, {"token_ids", ids}, {"logprobs", std::move(logprobs)},
                                      {"finish_reason", finish ? json(*finish) : json(nullptr)}}})}};
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
      ctx_.count(500);
      return;
    }
    if (stream_) {
      if (include_usage_ && !cancelled)
        channel_->event(dump({{"id", id_}, {"object", "text_completion"}, {"created", created_},
                              {"model", ctx_.served_model_name}, {"choices", json::array()}, {"usage", usage_.completions()}}));
      if (!cancelled) channel_->event("[DONE]");
      channel_->finish_events();
    } else if (cancelled) {
      respond_json(*channel_, 503, ApiError(503, "the request was cancelled: the server is shutting down", "server_error").to_json());
    } else {
      json choices = json::array();
      for (size_t i = 0; i < choices_.size(); ++i)
        choices.push_back({{"index", i}, {"text", choices_[i].text}, {"token_ids", choices_[i].token_ids},
                           {"logprobs", choices_[i].logprobs ? choices_[i].logprobs->value() : json(nullptr)},
                           {"finish_reason", *choices_[i].finish_reason}});
      respond_json(*channel_, 200, {{"id", id_}, {"object", "text_completion"}, {"created", created_},
                                    {"model", ctx_.served_model_name}, {"choices", choices}, {"usage", usage_.completions()}});
    }
    if (!cancelled) ctx_.count(200);
  }

  JobContext ctx_;
  std::shared_ptr<ResponseChannel> channel_;
  bool stream_;
  bool include_usage_;
  bool echo_;
  size_t n_;  // choices per prompt
  std::mutex mutex_;
  std::vector<Choice> choices_;
  std::vector<LaterChoices> later_;  // per prompt
  size_t finished_ = 0;
  Usage usage_;
  std::string error_;
  std::string id_;
  int64_t created_;
};

}  // namespace

void start_completion_job(JobContext ctx, std::shared_ptr<ResponseChannel> channel, CompletionRequest request) {
  auto job = std::make_shared<CompletionJob>(std::move(ctx), std::move(channel), request);
  job->start(std::move(request.specs));
}

}  // namespace moeserve::server
