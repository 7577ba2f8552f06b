// --max-in-flight, counted in engine requests: a completions request with p prompts and n choices takes p * n
// places, a chat request with n choices n. A request takes one place on arrival, for the time it renders (so the
// render queue is bounded by the same limit), and its places once rendered; each place is freed when its engine
// request has finished. Requests that find no place get 429.
#pragma once

#include <cstdint>
#include <mutex>

namespace moeserve::server {

class Admission {
 public:
  explicit Admission(int64_t limit) : limit_(limit) {}

  // A place for a request about to render; false when all are taken.
  bool arrive() {
    std::lock_guard lock(mutex_);
    if (taken_ >= limit_) return false;
    ++taken_;
    return true;
  }
  // The rendered request needs `places` (one per engine request) instead of its render place; false, and its
  // render place freed, when they do not fit.
  bool admit(int64_t places) {
    std::lock_guard lock(mutex_);
    if (taken_ - 1 + places > limit_) {
      --taken_;
      return false;
    }
    taken_ += places - 1;
    return true;
  }
  // Frees one place: an engine request finished, or a request ended before it was admitted.
  void release() {
    std::lock_guard lock(mutex_);
    --taken_;
  }
  int64_t limit() const { return limit_; }
  int64_t taken() const {
    std::lock_guard lock(mutex_);
    return taken_;
  }

 private:
  const int64_t limit_;
  mutable std::mutex mutex_;
  int64_t taken_ = 0;
};

}  // namespace moeserve::server
