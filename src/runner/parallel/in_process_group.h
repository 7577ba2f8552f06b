// N ranks in one process, each driven by its own thread, exchanging host memory: the CPU implementation of the
// Communicator (communicator.h). A collective is two barriers: every rank posts its buffer and waits for the others,
// reads theirs, then waits again before returning, so no rank overwrites a buffer another is still reading.
// A size mismatch between ranks, or an abort, fails every rank's collective with the reason instead of hanging.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runner/parallel/communicator.h"

namespace moeserve {

class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  Communicator& rank(int r);
  // After an abort the group stays failed; reset() makes it usable again once no rank is inside a collective.
  void reset();

 private:
  class Rank;
  friend class Rank;
  enum class Op { all_reduce_sum, all_gather };
  struct Posted {
    Op op = Op::all_reduce_sum;
    const void* data = nullptr;
    size_t bytes = 0;
  };

  // Posts this rank's buffer and waits until every rank has; throws when the group is aborted or the ranks disagree.
  void post_and_wait(int rank, const Posted& posted);
  void wait_all(std::unique_lock<std::mutex>& lock);
  void abort(const std::string& why);

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<Posted> posted_;
  std::string aborted_;  // empty while the group works
};

}  // namespace moeserve
