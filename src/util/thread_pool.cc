#include "util/thread_pool.h"

#include <algorithm>
#include <utility>

namespace moeserve {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

// Takes the next chunk of the current job, if any, and runs it outside the lock.
bool ThreadPool::run_one_chunk() {
  std::unique_lock lock(mutex_);
  if (body_ == nullptr || next_ >= total_) return false;
  size_t begin = next_;
  size_t end = std::min(total_, begin + chunk_);
  next_ = end;
  const auto* body = body_;
  lock.unlock();
  std::exception_ptr error;
  try {
    (*body)(begin, end);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (error && !error_) error_ = error;
  if (--outstanding_ == 0) work_done_.notify_all();
  return true;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || (generation_ != seen && next_ < total_); });
      if (stopping_) return;
      seen = generation_;
    }
    while (run_one_chunk()) {
    }
  }
}

void ThreadPool::parallel_for(size_t n, size_t min_chunk, const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  size_t threads = size();
  size_t chunk = std::max<size_t>(std::max<size_t>(min_chunk, 1), (n + threads * 4 - 1) / (threads * 4));
  if (workers_.empty() || chunk >= n) {
    body(0, n);
    return;
  }
  std::lock_guard job_lock(job_mutex_);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    total_ = n;
    chunk_ = chunk;
    next_ = 0;
    outstanding_ = (n + chunk - 1) / chunk;
    error_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  while (run_one_chunk()) {
  }
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return outstanding_ == 0; });
  body_ = nullptr;
  total_ = 0;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace moeserve
