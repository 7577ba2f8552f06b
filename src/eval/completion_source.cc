#include "eval/completion_source.h"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>

#include "harmony/completion.h"
#include "harmony/render.h"
#include "util/error.h"

namespace moeserve::eval {

EngineCompletionSource::EngineCompletionSource(std::shared_ptr<ModelRunner> runner,
                                               std::shared_ptr<const Tokenizer> tokenizer, EngineConfig config)
    : tokenizer_(std::move(tokenizer)), runner_name_(runner->name()), engine_(std::move(runner), config) {}

std::string EngineCompletionSource::describe() const {
  return fmt::format("in-process engine on the {} runner ({})", runner_name_, engine_.capacity_summary());
}

std::vector<Completion> EngineCompletionSource::complete(const std::vector<CompletionRequest>& requests) {
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
      ++finished;
      done.notify_all();
    };
    try {
      RequestSpec spec;
      spec.prompt = harmony::render_conversation_for_completion(*tokenizer_, requests[i].conversation);
      spec.sampling = requests[i].sampling;
      spec.max_tokens = requests[i].max_tokens;
      spec.stop_tokens = harmony::assistant_stop_tokens();
      engine_.submit(std::move(spec), on_event);
    } catch (const Error& e) {  // a request that cannot run (say, too long for the context): that sample fails
      std::lock_guard lock(mutex);
      completions[i].error = e.what();
      ++finished;
    }
  }
  std::unique_lock lock(mutex);
  done.wait(lock, [&] { return finished == requests.size(); });
  for (size_t i = 0; i < requests.size(); ++i) {
    completions[i].tokens = static_cast<int64_t>(tokens[i].size());
    completions[i].text = tokenizer_->decode(tokens[i]);
  }
  return completions;
}

}  // namespace moeserve::eval
