#include "bench/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace moeserve::bench {

ProgressMode progress_mode(bool disabled) {
  if (disabled) return ProgressMode::off;
  return ::isatty(STDERR_FILENO) == 1 ? ProgressMode::terminal : ProgressMode::lines;
}

ProgressLine::ProgressLine(std::function<std::string()> status, ProgressMode mode, std::chrono::milliseconds period)
    : status_(std::move(status)), mode_(mode), period_(period) {
  if (period_.count() == 0)
    period_ = mode == ProgressMode::terminal ? std::chrono::milliseconds(500) : std::chrono::seconds(30);
  if (mode_ != ProgressMode::off) thread_ = std::thread([this] { loop(); });
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
    if (mode_ == ProgressMode::terminal) std::fputc('\n', stderr);
    std::fflush(stderr);
  }
}

void ProgressLine::loop() {
  std::unique_lock lock(mutex_);
  // As lines, the first comes after a period: a short job prints only its final line.
  if (mode_ == ProgressMode::lines) wake_.wait_for(lock, period_, [this] { return stop_; });
  while (!stop_) {
    lock.unlock();
    draw();
    lock.lock();
    wake_.wait_for(lock, period_, [this] { return stop_; });
  }
}

void ProgressLine::draw() {
  const std::string line = status_();
  if (mode_ == ProgressMode::lines) {
    std::fprintf(stderr, "%s\n", line.c_str());
  } else {
    // Pad with spaces over a longer previous line, then return to the line's start.
    const std::string padding(last_width_ > line.size() ? last_width_ - line.size() : 0, ' ');
    std::fprintf(stderr, "\r%s%s", line.c_str(), padding.c_str());
    last_width_ = line.size();
  }
  std::fflush(stderr);
}

std::string short_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

WorkProgress::WorkProgress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), start_(std::chrono::steady_clock::now()) {}

void WorkProgress::finished(int64_t tokens, bool failed) {
  tokens_ += tokens;
  failed_ += failed;
  ++done_;
}

std::string WorkProgress::status() const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const uint64_t done = done_.load();
  const int64_t tokens = tokens_.load();
  // Items finish at the rate so far; the first one gives no estimate.
  const std::string eta =
      done == 0 ? "ETA ?"
      : done >= total_
          ? "done"
          : "ETA " + short_duration(elapsed / static_cast<double>(done) * static_cast<double>(total_ - done));
  return fmt::format("{}: {}/{} done, {} failed | {} tokens, {:.0f} tok/s | {} elapsed, {}", label_, done, total_,
                     failed_.load(), tokens, elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0,
                     short_duration(elapsed), eta);
}

}  // namespace moeserve::bench
