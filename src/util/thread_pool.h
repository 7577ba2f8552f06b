// A fixed pool of worker threads for data-parallel loops (the CPU runner's matmuls, attention heads and
// experts). parallel_for splits [0, n) into contiguous chunks, runs them on the workers and the caller,
// and returns when all are done. Exceptions thrown by the body are rethrown in the caller.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moeserve {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls body(begin, end) over chunks covering [0, n); chunks hold at least min_chunk items.
  void parallel_for(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& body);

 private:
  void worker_loop();
  bool run_one_chunk();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  bool stopping_ = false;
  // The job in flight (one at a time; parallel_for is not reentrant).
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  size_t total_ = 0;
  size_t chunk_ = 0;
  size_t next_ = 0;
  size_t outstanding_ = 0;
  uint64_t generation_ = 0;
  std::exception_ptr error_;
  std::mutex job_mutex_;
};

}  // namespace moeserve
