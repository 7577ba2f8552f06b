// The workers that turn request bodies into engine requests: parsing, Harmony rendering and tokenising, up to
// megabytes of text per request. The I/O threads only hand bodies over, so they keep answering (/health, other
// connections, disconnects) while heavy requests render. The queue is bounded by the server's admission (a
// request takes its place before it is queued).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moeserve::server {

class RenderPool {
 public:
  explicit RenderPool(int threads);
  ~RenderPool() { stop(); }
  RenderPool(const RenderPool&) = delete;
  RenderPool& operator=(const RenderPool&) = delete;

  // Queues a task; false once stopped.
  bool submit(std::function<void()> task);
  // Runs the tasks already queued, then joins the workers.
  void stop();

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace moeserve::server
