#include "runner/parallel/in_process_group.h"

#include <algorithm>
#include <cstring>

#include "runner/parallel/group_aborted.h"
#include "util/error.h"

namespace moeserve {

class InProcessGroup::Rank : public Communicator {
 public:
  Rank(InProcessGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

  void all_reduce_sum(std::span<float> data) override {
    group_.post_and_wait(rank_, {Op::all_reduce_sum, data.data(), data.size_bytes()});
    const auto input = [&](int r) { return static_cast<const float*>(group_.posted_[r].data); };
    sum_.assign(input(0), input(0) + data.size());
    for (int r = 1; r < size(); ++r) {
      const float* x = input(r);
      for (size_t i = 0; i < data.size(); ++i) sum_[i] += x[i];
    }
    barrier();  // every rank has read every buffer: each may now overwrite its own
    std::copy(sum_.begin(), sum_.end(), data.begin());
  }

  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    MOESERVE_CHECK(all.size() == mine.size() * static_cast<size_t>(size()),
                   "all_gather of {} bytes a rank over {} ranks into {} bytes", mine.size(), size(), all.size());
    group_.post_and_wait(rank_, {Op::all_gather, mine.data(), mine.size()});
    for (int r = 0; r < size(); ++r)
      if (mine.size() > 0) std::memcpy(all.data() + r * mine.size(), group_.posted_[r].data, mine.size());
    barrier();
  }

  void abort(const std::string& why) override { group_.abort(why); }

 private:
  void barrier() {
    std::unique_lock lock(group_.mutex_);
    group_.wait_all(lock);
  }

  InProcessGroup& group_;
  const int rank_;
  std::vector<float> sum_;
};

InProcessGroup::InProcessGroup(int size) : posted_(static_cast<size_t>(std::max(size, 0))) {
  MOESERVE_CHECK(size >= 1, "a group of {} ranks", size);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::rank(int r) {
  MOESERVE_CHECK(r >= 0 && r < size(), "rank {} of a group of {}", r, size());
  return *ranks_[r];
}

void InProcessGroup::reset() {
  std::lock_guard lock(mutex_);
  arrived_ = 0;
  aborted_.clear();
}

void InProcessGroup::abort(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (aborted_.empty()) aborted_ = why.empty() ? "aborted" : why;
  changed_.notify_all();
}

void InProcessGroup::post_and_wait(int rank, const Posted& posted) {
  std::unique_lock lock(mutex_);
  posted_[rank] = posted;
  if (arrived_ + 1 == size()) {  // the last to arrive checks that every rank called the same collective
    for (int r = 0; r < size(); ++r)
      if (posted_[r].op != posted.op || posted_[r].bytes != posted.bytes) {
        aborted_ = fmt::format("ranks disagree on a collective: rank {} posted {} bytes, rank {} posted {} bytes", r,
                               posted_[r].bytes, rank, posted.bytes);
        changed_.notify_all();
        break;
      }
  }
  wait_all(lock);
}

void InProcessGroup::wait_all(std::unique_lock<std::mutex>& lock) {
  if (!aborted_.empty()) throw GroupAborted(aborted_);
  const uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
  } else {
    changed_.wait(lock, [&] { return generation_ != generation || !aborted_.empty(); });
  }
  if (!aborted_.empty()) throw GroupAborted(aborted_);
}

}  // namespace moeserve
