// The engine as the server and the benchmark use it: a background thread stepping an EngineCore, with submit
// and cancel callable from any thread. Events are delivered on the engine thread; callbacks must be quick (hand
// the event to your own thread or queue).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "engine/engine_core.h"

namespace moeserve {

class Engine {
 public:
  Engine(std::shared_ptr<ModelRunner> runner, EngineConfig config);
  ~Engine();  // cancels what is left and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Fails (moeserve::Error, naming the field) for a request that can never run; safe from any thread.
  void validate(const RequestSpec& spec) const { core_->validate(spec); }
  // Validates and queues a request; throws moeserve::Error for a request that can never run, or once draining.
  uint64_t submit(RequestSpec spec, EventCallback on_event);
  void cancel(uint64_t id);
  // Stops accepting requests, lets in-flight ones finish for up to `timeout`, cancels the rest, and returns once
  // every request has delivered its final event.
  void drain(std::chrono::milliseconds timeout);

  EngineMetrics metrics() const;
  const ModelConfig& model_config() const { return runner_->config(); }
  std::string capacity_summary() const { return capacity_; }
  int64_t max_sequence_tokens() const { return max_sequence_tokens_; }
  int64_t in_flight() const { return in_flight_.load(); }

 private:
  void loop();

  std::shared_ptr<ModelRunner> runner_;
  std::unique_ptr<EngineCore> core_;  // touched only by the engine thread after construction
  std::string capacity_;
  int64_t max_sequence_tokens_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  struct Pending {
    uint64_t id;
    RequestSpec spec;
    EventCallback on_event;
  };
  std::deque<Pending> submitted_;
  std::unordered_set<uint64_t> cancels_;
  bool stopping_ = false;
  bool draining_ = false;
  uint64_t next_id_ = 1;
  std::atomic<int64_t> in_flight_{0};
  std::condition_variable idle_;

  mutable std::mutex metrics_mutex_;
  EngineMetrics metrics_snapshot_;
  std::thread thread_;
};

// A blocking consumer of one request's events, for command-line tools and tests.
class RequestStream {
 public:
  EventCallback callback();
  // The next event; blocks until one arrives.
  RequestEvent next();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestEvent> events_;
};

}  // namespace moeserve
