#include "engine/engine.h"

#include "util/error.h"

namespace moeserve {

Engine::Engine(std::shared_ptr<ModelRunner> runner, EngineConfig config) : runner_(std::move(runner)) {
  core_ = std::make_unique<EngineCore>(*runner_, config);
  capacity_ = core_->capacity_summary();
  max_sequence_tokens_ = core_->max_sequence_tokens();
  metrics_snapshot_ = core_->metrics();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t Engine::submit(RequestSpec spec, EventCallback on_event) {
  core_->validate(spec);  // reads only the immutable config and pool size: safe from any thread
  if (!spec.arrival) spec.arrival = Clock::now();
  uint64_t id;
  {
    std::lock_guard lock(mutex_);
    MOESERVE_CHECK(!draining_ && !stopping_, "the engine is shutting down and accepts no new requests");
    id = next_id_++;
    submitted_.push_back({id, std::move(spec), std::move(on_event)});
    ++in_flight_;
  }
  wake_.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard lock(mutex_);
    cancels_.insert(id);
  }
  wake_.notify_all();
}

void Engine::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  draining_ = true;
  if (!idle_.wait_for(lock, timeout, [&] { return in_flight_ == 0; })) {
    // Cancel whatever is still in flight: every submitted id below next_id_ that has not finished.
    for (uint64_t id = 1; id < next_id_; ++id) cancels_.insert(id);
    wake_.notify_all();
    idle_.wait(lock, [&] { return in_flight_ == 0; });
  }
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  return metrics_snapshot_;
}

void Engine::loop() {
  while (true) {
    std::deque<Pending> arrived;
    std::unordered_set<uint64_t> cancels;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !submitted_.empty() || !cancels_.empty() || core_->has_work(); });
      if (stopping_) {
        for (uint64_t id = 1; id < next_id_; ++id) cancels_.insert(id);
      }
      arrived.swap(submitted_);
      cancels.swap(cancels_);
    }
    // A request cancelled before it got here is still added: the core finishes it as cancelled in this step, so
    // it is counted like any other cancellation.
    for (auto& p : arrived) {
      auto on_event = [this, user = std::move(p.on_event)](const RequestEvent& e) {
        if (e.finish != FinishReason::none) {
          // Published before the answer goes out (the user's callback) and before in_flight() drops, so whoever
          // sees either sees this request in the metrics.
          std::lock_guard lock(metrics_mutex_);
          metrics_snapshot_ = core_->metrics();
        }
        if (user) user(e);
        if (e.finish == FinishReason::none) return;
        if (--in_flight_ == 0) {
          std::lock_guard lock(mutex_);
          idle_.notify_all();
        }
      };
      try {
        core_->add_request(p.id, std::move(p.spec), on_event);
      } catch (const std::exception& e) {
        RequestEvent refused;
        refused.request_id = p.id;
        refused.time = Clock::now();
        refused.finish = FinishReason::error;
        refused.error = e.what();
        on_event(refused);
      }
    }
    for (uint64_t id : cancels) core_->cancel(id);
    if (core_->has_work()) core_->step();
    {
      std::lock_guard lock(metrics_mutex_);
      metrics_snapshot_ = core_->metrics();
    }
    {
      std::lock_guard lock(mutex_);
      if (in_flight_ == 0) idle_.notify_all();
      if (stopping_ && !core_->has_work() && submitted_.empty()) return;
    }
  }
}

EventCallback RequestStream::callback() {
  return [this](const RequestEvent& e) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(e);
    }
    ready_.notify_all();
  };
}

RequestEvent RequestStream::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !events_.empty(); });
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

}  // namespace moeserve
