// Progress while a long job runs (bench, eval, specbench): on a terminal, one line redrawn in place twice a
// second; otherwise (a log file, CI, nohup) a plain line every 30 s, so that a job of hours still says where it is.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace moeserve::bench {

enum class ProgressMode {
  off,       // --no-progress
  terminal,  // redrawn in place ("\r")
  lines,     // a line every `period`
};

// terminal when stderr is a terminal, else lines; off when `disabled`.
ProgressMode progress_mode(bool disabled);

class ProgressLine {
 public:
  // `period` 0: 500 ms on a terminal, 30 s as lines.
  ProgressLine(std::function<std::string()> status, ProgressMode mode,
               std::chrono::milliseconds period = std::chrono::milliseconds(0));
  ~ProgressLine();
  // Draws the last status and ends the line.
  void finish();

 private:
  void loop();
  void draw();

  std::function<std::string()> status_;
  ProgressMode mode_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  size_t last_width_ = 0;
  std::thread thread_;
};

// "1h02m", "3m05s", "42s": durations as a progress line shows them.
std::string short_duration(double seconds);

// A job of `total` items (eval samples, specbench turns): items finish from any thread; status() is
// "LABEL: 12/64 done, 2 failed | 3412 tokens, 45 tok/s | 1m10s elapsed, ETA 5m20s".
class WorkProgress {
 public:
  WorkProgress(std::string label, uint64_t total);
  void finished(int64_t tokens, bool failed);
  std::string status() const;
  uint64_t done() const { return done_.load(); }

 private:
  std::string label_;
  uint64_t total_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0}, failed_{0};
  std::atomic<int64_t> tokens_{0};
};

}  // namespace moeserve::bench
