#include "bench/engine_series.h"

namespace moeserve::bench {

EngineReading engine_reading(const EngineMetrics& m, TimePoint time) {
  return {.time = time,
          .running = m.running,
          .waiting = m.waiting,
          .kv_usage = m.kv_usage(),
          .steps = m.steps,
          .busy_seconds = m.busy_seconds,
          .preemptions = m.preemptions,
          .prefix_queried_tokens = m.prefix_queried_tokens,
          .prefix_hit_tokens = m.prefix_hit_tokens,
          .generated_tokens = m.generated_tokens};
}

bool EngineSeries::due(TimePoint now) const { return readings_.empty() || now - readings_.back().time >= period_; }

void EngineSeries::add(const EngineReading& r) {
  readings_.push_back(r);
  if (readings_.size() < kMaxPoints) return;
  // Keep the first and every second reading after it; counters stay exact since they are cumulative.
  std::vector<EngineReading> kept;
  kept.reserve(kMaxPoints / 2 + 1);
  for (size_t i = 0; i < readings_.size(); i += 2) kept.push_back(readings_[i]);
  readings_ = std::move(kept);
  period_ *= 2;
}

nlohmann::json EngineSeries::to_json(TimePoint origin) const {
  nlohmann::json t = nlohmann::json::array(), running = nlohmann::json::array(), waiting = nlohmann::json::array(),
                 kv = nlohmann::json::array(), preemptions = nlohmann::json::array(), prefix = nlohmann::json::array(),
                 step_ms = nlohmann::json::array(), generated = nlohmann::json::array();
  for (size_t i = 1; i < readings_.size(); ++i) {
    const EngineReading& a = readings_[i - 1];
    const EngineReading& b = readings_[i];
    t.push_back(std::chrono::duration<double>(b.time - origin).count());
    running.push_back(b.running);
    waiting.push_back(b.waiting);
    kv.push_back(b.kv_usage);
    preemptions.push_back(b.preemptions - a.preemptions);
    const uint64_t queried = b.prefix_queried_tokens - a.prefix_queried_tokens;
    prefix.push_back(queried ? static_cast<double>(b.prefix_hit_tokens - a.prefix_hit_tokens) / queried : 0.0);
    const uint64_t steps = b.steps - a.steps;
    step_ms.push_back(steps ? (b.busy_seconds - a.busy_seconds) / static_cast<double>(steps) * 1e3 : 0.0);
    generated.push_back(b.generated_tokens - a.generated_tokens);
  }
  if (t.empty()) return nullptr;
  return {{"period_ms", period_.count()},
          {"t", t},
          {"running", running},
          {"waiting", waiting},
          {"kv_usage", kv},
          {"preemptions", preemptions},
          {"prefix_hit_rate", prefix},
          {"mean_step_ms", step_ms},
          {"generated_tokens", generated}};
}

void EngineSampler::start() {
  stop();
  std::lock_guard lock(mutex_);
  series_ = EngineSeries();
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void EngineSampler::stop() {
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

nlohmann::json EngineSampler::to_json(TimePoint origin) const {
  std::lock_guard lock(mutex_);
  return series_.to_json(origin);
}

void EngineSampler::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const TimePoint now = Clock::now();
    if (series_.due(now)) {
      lock.unlock();
      const EngineReading r = engine_reading(engine_->metrics(), now);
      lock.lock();
      series_.add(r);
    }
    wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stopping_; });
  }
  series_.add(engine_reading(engine_->metrics(), Clock::now()));
}

}  // namespace moeserve::bench
