// The in-process engine over time, for the report: batch size, waiting requests, KV use, preemptions, prefix-cache
// hits and step time, sampled from Engine::metrics() on a thread of its own while a run is in progress. Memory is
// bounded: at most kMaxPoints samples are kept; when full, every other one is dropped and the period doubles, so
// a run of any length keeps an even coverage.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/sut.h"
#include "engine/engine.h"

namespace moeserve::bench {

// One reading: what is true now (running, waiting, KV) and the engine's counters since start.
struct EngineReading {
  TimePoint time{};
  size_t running = 0;
  size_t waiting = 0;
  double kv_usage = 0;
  uint64_t steps = 0;
  double busy_seconds = 0;
  uint64_t preemptions = 0;
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t generated_tokens = 0;
};

EngineReading engine_reading(const EngineMetrics& m, TimePoint time);

// Readings with bounded memory (see the file comment).
class EngineSeries {
 public:
  static constexpr size_t kMaxPoints = 1024;
  explicit EngineSeries(std::chrono::milliseconds period = std::chrono::milliseconds(250)) : period_(period) {}

  void add(const EngineReading& r);
  // Whether a reading taken at `now` is due (a period after the last kept one).
  bool due(TimePoint now) const;
  size_t size() const { return readings_.size(); }
  std::chrono::milliseconds period() const { return period_; }

  // Per reading, seconds since `origin` and the values; counters become rates over the interval since the
  // previous reading: preemptions and generated tokens in it, prefix-hit share of the tokens looked up in it, mean
  // step time in it.
  nlohmann::json to_json(TimePoint origin) const;

 private:
  std::vector<EngineReading> readings_;
  std::chrono::milliseconds period_;
};

// Samples an engine into an EngineSeries on its own thread between start() and stop().
class EngineSampler {
 public:
  explicit EngineSampler(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}
  ~EngineSampler() { stop(); }
  void start();  // clears what an earlier run recorded
  void stop();
  nlohmann::json to_json(TimePoint origin) const;

 private:
  void loop();

  std::shared_ptr<Engine> engine_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  EngineSeries series_;
  std::thread thread_;
};

}  // namespace moeserve::bench
