// A runner with no model that checks the paged KV the engine hands it. Every KV slot records the position and
// group written there and a hash of the whole token prefix up to that position; reads verify them. The sampled
// token is a function of the prefix hash, so a wrong block, a block freed too early or reused while still
// visible, or KV mixed between sequences changes the output (and usually fails a check at once).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "runner/runner.h"
#include "sampling/sampler.h"

namespace moeserve::testing {

class CheckingFakeRunner : public ModelRunner {
 public:
  // Two layers: sliding (window) then full attention.
  CheckingFakeRunner(int vocab = 1000, int window = 8);

  std::string name() const override { return "fake"; }
  const ModelConfig& config() const override { return config_; }
  size_t kv_block_bytes(int block_size) const override { return 64 * static_cast<size_t>(block_size); }
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;

  int64_t forward_calls() const { return calls_; }
  int64_t tokens_processed() const { return tokens_; }

 private:
  struct Slot {
    int32_t position = -1;
    int group = -1;
    uint64_t prefix_hash = 0;
    uint64_t parent_hash = 0;  // prefix hash of the position before: ties the visible chain to this sequence
  };
  Slot& slot(int group, std::span<const int32_t> table, int32_t position);

  ModelConfig config_;
  KvGroups groups_;
  KvCacheLayout layout_;
  std::vector<Slot> slots_;
  int64_t calls_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace moeserve::testing
