// The periodic stats line vLLM's servers print (its LoggingStatLogger), from two engine metric snapshots:
//   Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 95.1 tokens/s, Running: 3 reqs, Waiting: 0
//   reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 40.0%[, Mean acceptance length: 2.61]
// Throughputs, the hit rate (prompt tokens found in the prefix cache over those looked up) and the acceptance
// length (1 + accepted / drafts, when the engine speculates) are over the interval; the request counts and KV
// usage are now. An engine that was idle over the interval and still is logs nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace moeserve::server {

// The line for an interval of `seconds` from `before` to `now`; nullopt when nothing happened and nothing runs.
std::optional<std::string> stats_line(const EngineMetrics& before, const EngineMetrics& now, double seconds);

// Logs stats_line() every interval on a thread of its own, until destroyed.
class StatsLogger {
 public:
  StatsLogger(std::shared_ptr<const Engine> engine, std::chrono::milliseconds interval);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  void run();

  std::shared_ptr<const Engine> engine_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace moeserve::server
