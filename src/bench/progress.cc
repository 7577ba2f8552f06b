#include "bench/progress.h"

#include <unistd.h>

#include <cstdio>

namespace moeserve::bench {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressLine::ProgressLine(std::function<std::string()> status, bool enabled, std::chrono::milliseconds period)
    : status_(std::move(status)), period_(period) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::finish() {
  {
    std::lock_guard lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    draw();
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
}

void ProgressLine::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    draw();
    lock.lock();
    wake_.wait_for(lock, period_, [this] { return stop_; });
  }
}

void ProgressLine::draw() {
  const std::string line = status_();
  // Pad with spaces over a longer previous line, then return to the line's start.
  const std::string padding(last_width_ > line.size() ? last_width_ - line.size() : 0, ' ');
  std::fprintf(stderr, "\r%s%s", line.c_str(), padding.c_str());
  std::fflush(stderr);
  last_width_ = line.size();
}

}  // namespace moeserve::bench
