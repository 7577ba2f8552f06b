#include "server/completion_job.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/stop_string_filter.h"
#include "tokenizer/incremental_decoder.h"

namespace moeserve::server {

using nlohmann::json;

namespace {

// A /v1/completions request: one engine request per prompt, raw text out (no Harmony parsing), plus the
// generated token ids as the extension field "token_ids" on every choice (MLPerf needs the ids).
class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(JobContext ctx, std::shared_ptr<ResponseChannel> channel, bool stream, bool include_usage,
                const std::vector<std::string>& stops, size_t prompts)
      : ctx_(std::move(ctx)), channel_(std::move(channel)), stream_(stream), include_usage_(include_usage),
        choices_(prompts), id_(random_id("cmpl-")), created_(unix_now()) {
    for (auto& c : choices_) {
      c.decoder.emplace(ctx_.tokenizer);
      c.stops.emplace(stops);
    }
  }

  void start(std::vector<RequestSpec> specs) {
    auto self = shared_from_this();
    channel_->on_disconnect([self] {
      for (auto& c : self->choices_) c.job.cancel(self->ctx_.engine);
    });
    if (stream_) channel_->start_events();
    for (size_t i = 0; i < specs.size(); ++i) {
      usage_.prompt_tokens += static_cast<int64_t>(specs[i].prompt.size());
      choices_[i].job.submit(ctx_, std::move(specs[i]), [self, i](const RequestEvent& e) { self->on_event(i, e); });
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
  };

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
    Choice& c = choices_[index];
    if (c.finish_reason) return;
    std::string released;
    std::vector<TokenId> new_ids;
    for (TokenId t : e.tokens) {
      c.token_ids.push_back(t);
      new_ids.push_back(t);
      ++usage_.completion_tokens;
      released += add_text(c, c.decoder->push(t), /*last=*/false);
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
      channel_->event(dump(chunk(index, released, new_ids, c.finish_reason)));
    if (c.finish_reason && ++finished_ == choices_.size()) complete();
  }

  json chunk(size_t index, const std::string& text, const std::vector<TokenId>& ids,
             const std::optional<std::string>& finish) const {
    return {{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", ctx_.served_model_name},
            {"choices", json::array({{{"index", index}, {"text", text}, {"token_ids", ids}, {"logprobs", nullptr},
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
                           {"logprobs", nullptr}, {"finish_reason", *choices_[i].finish_reason}});
      respond_json(*channel_, 200, {{"id", id_}, {"object", "text_completion"}, {"created", created_},
                                    {"model", ctx_.served_model_name}, {"choices", choices}, {"usage", usage_.completions()}});
    }
    if (!cancelled) ctx_.count(200);
  }

  JobContext ctx_;
  std::shared_ptr<ResponseChannel> channel_;
  bool stream_;
  bool include_usage_;
  std::mutex mutex_;
  std::vector<Choice> choices_;
  size_t finished_ = 0;
  Usage usage_;
  std::string error_;
  std::string id_;
  int64_t created_;
};

}  // namespace

void start_completion_job(JobContext ctx, std::shared_ptr<ResponseChannel> channel, CompletionRequest request) {
  auto job = std::make_shared<CompletionJob>(std::move(ctx), std::move(channel), request.stream, request.include_usage,
                                             request.stops, request.specs.size());
  job->start(std::move(request.specs));
}

}  // namespace moeserve::server
