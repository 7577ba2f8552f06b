// A runner that runs each step when it is collected, not when it is launched, as a GPU runs it after launch()
// returns: launch() copies the batch (the engine edits tokens and block tables while a step is in flight) and
// collect() runs the copy on the runner it wraps. Every launch and collect is logged, with a hook at collect for
// looking at the engine while the step is still in flight.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runner/runner.h"
#include "util/error.h"

namespace moeserve::testing {

class DeferredRunner : public ModelRunner {
 public:
  explicit DeferredRunner(ModelRunner& inner) : inner_(inner) {}

  std::string name() const override { return "deferred " + inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  size_t kv_block_bytes(int block_size) const override { return inner_.kv_block_bytes(block_size); }
  void allocate_kv_cache(const KvCacheLayout& layout) override { inner_.allocate_kv_cache(layout); }
  const KvCacheLayout& kv_cache_layout() const override { return inner_.kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override { inner_.forward(batch, output); }

  void launch(const ForwardBatch& batch) override {
    MOESERVE_CHECK(!launched_, "a step launched while one is in flight");
    copy(batch);
    launched_ = true;
    log.push_back("launch " + std::to_string(launches_++));
  }
  void collect(ForwardOutput& output) override {
    MOESERVE_CHECK(launched_, "collect without a launch");
    if (before_collect) before_collect(collects_);
    launched_ = false;
    log.push_back("collect " + std::to_string(collects_++));
    inner_.forward(batch_, output);
  }

  std::vector<std::string> log;
  std::function<void(int step)> before_collect;  // called with the index of the step about to be collected

 private:
  struct OwnedStep {
    std::vector<int32_t> tokens, tree_parent, logprob_tokens;
    std::vector<std::vector<int32_t>> block_tables;
    std::vector<LogitEdit> logit_edits;
    std::vector<uint32_t> allowed_tokens;
    SamplingParams sampling;
  };

  void copy(const ForwardBatch& batch) {
    owned_.assign(batch.sequences.size(), {});
    batch_ = batch;
    for (size_t i = 0; i < batch.sequences.size(); ++i) {
      const SequenceStep& from = batch.sequences[i];
      OwnedStep& own = owned_[i];
      SequenceStep& to = batch_.sequences[i];
      own.tokens.assign(from.tokens.begin(), from.tokens.end());
      own.tree_parent.assign(from.tree_parent.begin(), from.tree_parent.end());
      own.logprob_tokens.assign(from.logprob_tokens.begin(), from.logprob_tokens.end());
      own.logit_edits.assign(from.logit_edits.begin(), from.logit_edits.end());
      own.allowed_tokens.assign(from.allowed_tokens.begin(), from.allowed_tokens.end());
      for (const auto& table : from.block_tables) own.block_tables.emplace_back(table.begin(), table.end());
      to.tokens = own.tokens;
      to.tree_parent = own.tree_parent;
      to.logprob_tokens = own.logprob_tokens;
      to.logit_edits = own.logit_edits;
      to.allowed_tokens = own.allowed_tokens;
      to.block_tables.assign(own.block_tables.begin(), own.block_tables.end());
      if (from.sampling != nullptr) {
        own.sampling = *from.sampling;
        to.sampling = &own.sampling;
      }
    }
  }

  ModelRunner& inner_;
  ForwardBatch batch_;
  std::vector<OwnedStep> owned_;
  bool launched_ = false;
  int launches_ = 0, collects_ = 0;
};

}  // namespace moeserve::testing
