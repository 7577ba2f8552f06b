#include "eval/completion_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "util/error.h"

namespace moeserve::eval {

EngineCompletionSource::EngineCompletionSource(std::shared_ptr<ModelRunner> runner,
                                               std::shared_ptr<const Tokenizer> tokenizer, EngineConfig config)
    : tokenizer_(std::move(tokenizer)),
      format_(*tokenizer_),
      runner_name_(runner->name()),
      engine_(std::move(runner), config) {}

std::string EngineCompletionSource::describe() const {
  return fmt::format("in-process engine on the {} runner ({})", runner_name_, engine_.capacity_summary());
}

std::vector<Completion> EngineCompletionSource::complete(const std::vector<CompletionRequest>& requests,
                                                         bench::WorkProgress* progress) {
  std::vector<Completion> completions(requests.size());
  std::vector<std::vector<int32_t>> tokens(requests.size());
  std::mutex mutex;
  std::condition_variable done;
  size_t finished = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto on_event = [&, i](const RequestEvent& event) {
      std::lock_guard lock(mutex);
      tokens[i].insert(tokens[i].end(), event.tokens.begin(), event.tokens.end());
      if (event.finish == FinishReason::none) return;
      completions[i].stopped = event.finish == FinishReason::stop;
      if (event.finish == FinishReason::error || event.finish == FinishReason::cancelled) {
        completions[i].error = event.error.empty() ? finish_reason_name(event.finish) : event.error;
      }
      if (progress) progress->finished(static_cast<int64_t>(tokens[i].size()), !completions[i].error.empty());
      ++finished;
      done.notify_all();
    };
    try {
      RequestSpec spec;
      spec.prompt = format_.render(requests[i].conversation);
      spec.sampling = requests[i].sampling;
      spec.max_tokens = requests[i].max_tokens;
      spec.stop_tokens = format_.stop_tokens();
      engine_.submit(std::move(spec), on_event);
    } catch (const Error& e) {  // a request that cannot run (say, too long for the context): that sample fails
      std::lock_guard lock(mutex);
      completions[i].error = e.what();
      if (progress) progress->finished(0, true);
      ++finished;
    }
  }
  std::unique_lock lock(mutex);
  done.wait(lock, [&] { return finished == requests.size(); });
  for (size_t i = 0; i < requests.size(); ++i) {
    completions[i].tokens = static_cast<int64_t>(tokens[i].size());
    completions[i].text = format_.scored_text(tokens[i]);
  }
  return completions;
}

namespace {

// Collects the HTTP SUT's reports until every sample has completed.
class CompletionCollector : public bench::SampleObserver {
 public:
  CompletionCollector(size_t samples, bench::WorkProgress* progress) : outputs_(samples), progress_(progress) {}
  void on_first_token(uint64_t, std::optional<int32_t>, bench::TimePoint) override {}
  void on_complete(uint64_t id, bench::SampleOutput output, bench::TimePoint) override {
    std::lock_guard lock(mutex_);
    if (progress_) progress_->finished(output.token_count, !output.error.empty());
    outputs_.at(id) = std::move(output);
    ++completed_;
    done_.notify_all();
  }
  std::vector<bench::SampleOutput> wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return completed_ == outputs_.size(); });
    return std::move(outputs_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<bench::SampleOutput> outputs_;
  bench::WorkProgress* progress_;
  size_t completed_ = 0;
};

}  // namespace

HttpCompletionSource::HttpCompletionSource(bench::HttpSutOptions options, std::shared_ptr<const Tokenizer> tokenizer)
    : options_(std::move(options)), tokenizer_(std::move(tokenizer)), format_(*tokenizer_) {}

std::string HttpCompletionSource::describe() const {
  return fmt::format("endpoint {} ({} API)", options_.endpoint,
                     options_.api == bench::HttpApi::openai ? "OpenAI" : "SGLang");
}

std::vector<Completion> HttpCompletionSource::complete(const std::vector<CompletionRequest>& requests,
                                                       bench::WorkProgress* progress) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<bench::SampleRequest> samples;
  for (const CompletionRequest& r : requests) {
    prompts.push_back(format_.render(r.conversation));
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    bench::SampleRequest sample;
    sample.id = i;
    sample.qsl_idx = i;
    sample.prompt = prompts[i];
    sample.max_tokens = requests[i].max_tokens;
    sample.sampling = requests[i].sampling;
    sample.scheduled = bench::Clock::now();
    samples.push_back(sample);
  }
  bench::HttpSut sut(options_);
  CompletionCollector collector(samples.size(), progress);
  sut.start(collector);
  sut.issue(samples);
  sut.flush();
  std::vector<bench::SampleOutput> outputs = collector.wait();
  sut.stop();
  std::vector<Completion> completions(requests.size());
  const std::vector<TokenId>& stops = format_.stop_tokens();
  for (size_t i = 0; i < outputs.size(); ++i) {
    Completion& c = completions[i];
    const bench::SampleOutput& o = outputs[i];
    c.tokens = o.token_count;
    if (!o.error.empty()) {
      c.error = o.error;
    } else if (!o.token_ids_known) {
      c.error = "the server returned text without token ids";
    } else {
      c.stopped = !o.tokens.empty() && std::find(stops.begin(), stops.end(), o.tokens.back()) != stops.end();
      try {
        c.text = format_.scored_text(o.tokens);
      } catch (const Error& e) {
        c.error = fmt::format("the reply cannot be decoded: {}", e.what());
      }
    }
  }
  return completions;
}

}  // namespace moeserve::eval
