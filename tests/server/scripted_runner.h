// A runner that "generates" a scripted reply: it keeps every token in its paged KV slots, so at each step it knows
// a sequence's whole history, and emits script(prompt)[i] as the i-th generated token. Lets the server tests
// produce exact Harmony replies (reasoning, tool calls) that a random tiny model never would. Past its script it
// emits the model's (first) end-of-sequence id.
#pragma once

#include <functional>
#include <vector>

#include "runner/runner.h"

namespace moeserve::testing {

class ScriptedRunner : public ModelRunner {
 public:
  using Script = std::function<std::vector<int32_t>(const std::vector<int32_t>& prompt)>;
  explicit ScriptedRunner(Script script);
  // A model of another shape (a DeepSeek-V3 one: its family, vocabulary and end-of-sequence ids).
  ScriptedRunner(Script script, ModelConfig config);

  std::string name() const override { return "scripted"; }
  const ModelConfig& config() const override { return config_; }
  size_t kv_block_bytes(int block_size) const override { return 4 * static_cast<size_t>(block_size); }
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;

 private:
  ModelConfig config_;
  KvCacheLayout layout_;
  std::vector<int32_t> slots_;
  Script script_;
};

}  // namespace moeserve::testing
