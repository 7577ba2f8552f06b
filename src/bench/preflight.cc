#include "bench/preflight.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::bench {

void Preflight::on_complete(uint64_t id, SampleOutput output, TimePoint) {
  MOESERVE_CHECK(id == kSampleId, "the SUT reported sample {} before the run began", id);
  std::lock_guard lock(mutex_);
  output_ = std::move(output);
  done_.notify_all();
}

void Preflight::run(SystemUnderTest& sut, const DatasetSample& sample, const SamplingParams& sampling,
                    const PreflightOptions& options) {
  MOESERVE_CHECK(!sample.prompt.empty(), "preflight: the dataset's first sample has an empty prompt");
  const std::vector<int32_t> prompt(sample.prompt.begin(),
                                    sample.prompt.begin() + std::min(sample.prompt.size(), options.prompt_tokens));
  SampleRequest request;
  request.id = kSampleId;
  request.prompt = prompt;
  request.max_tokens = options.max_tokens;
  request.sampling = sampling;
  request.scheduled = Clock::now();
  sut.issue(std::span(&request, 1));
  sut.flush();

  const TimePoint deadline = request.scheduled + options.timeout;
  std::unique_lock lock(mutex_);
  bool cancelled = false;
  while (!output_) {
    const bool interrupted = options.interrupt && options.interrupt->load();
    if (!cancelled && (interrupted || Clock::now() >= deadline)) {
      // Cancelling completes the sample; wait for that, so that no report comes after the hand-over.
      lock.unlock();
      sut.cancel_all();
      lock.lock();
      cancelled = true;
    }
    done_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (options.interrupt && options.interrupt->load()) return;
  MOESERVE_CHECK(!cancelled || output_->error.empty(), "preflight: {} did not answer a {}-token request within {} s; nothing was timed",
                 sut.name(), options.max_tokens, options.timeout.count());
  MOESERVE_CHECK(output_->error.empty(), "preflight request failed, nothing was timed: {}", output_->error);
  MOESERVE_CHECK(output_->token_count > 0,
                 "preflight: {} answered the request with no tokens (finish reason \"{}\"); nothing was timed",
                 sut.name(), output_->finish_reason);
}

}  // namespace moeserve::bench
