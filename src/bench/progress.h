// A live progress line on a terminal: redrawn in place from what `status` returns, until finished.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace moeserve::bench {

bool stderr_is_terminal();

class ProgressLine {
 public:
  // Draws nothing when `enabled` is false (stderr is not a terminal, or --no-progress).
  ProgressLine(std::function<std::string()> status, bool enabled,
               std::chrono::milliseconds period = std::chrono::milliseconds(500));
  ~ProgressLine();
  // Draws the last status and ends the line.
  void finish();

 private:
  void loop();
  void draw();

  std::function<std::string()> status_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  size_t last_width_ = 0;
  std::thread thread_;
};

}  // namespace moeserve::bench
