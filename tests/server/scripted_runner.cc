#include "server/scripted_runner.h"

#include <stdexcept>

namespace moeserve::testing {

ScriptedRunner::ScriptedRunner(Script script) : script_(std::move(script)) {
  config_.num_layers = 1;
  config_.hidden_size = 32;
  config_.num_heads = 1;
  config_.num_kv_heads = 1;
  config_.head_dim = 32;
  config_.num_experts = 1;
  config_.experts_per_token = 1;
  config_.intermediate_size = 32;
  config_.vocab_size = 201088;
  config_.sliding_window = 128;
  config_.max_position_embeddings = 131072;
  config_.layer_types = {AttentionKind::full};
  config_.eos_token_ids = {200002, 199999, 200012};
}

ScriptedRunner::ScriptedRunner(Script script, ModelConfig config) : config_(std::move(config)), script_(std::move(script)) {}

void ScriptedRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  layout_ = layout;
  slots_.assign(layout.num_blocks * layout.block_size, -1);
}

void ScriptedRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  output.sampled.clear();
  output.logits.clear();
  output.rows = 0;
  for (const SequenceStep& step : batch.sequences) {
    auto slot = [&](int32_t position) -> int32_t& {
      const auto& table = step.block_tables.at(0);
      const size_t logical = static_cast<size_t>(position / layout_.block_size);
      if (logical >= table.size() || table[logical] < 0) throw std::logic_error("scripted runner: unmapped KV block");
      const int32_t block = table[logical];
      return slots_[static_cast<size_t>(block) * layout_.block_size + position % layout_.block_size];
    };
    std::vector<int32_t> history;
    for (int32_t p = 0; p < step.start_position; ++p) history.push_back(slot(p));
    const int32_t n = static_cast<int32_t>(step.tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      slot(step.start_position + i) = step.tokens[i];
      history.push_back(step.tokens[i]);
      if (i < n - step.num_logits) continue;
      ++output.rows;
      // The token about to be sampled is the sample_index-th generated one: the prompt is what precedes them.
      const uint64_t index = step.sample_index + (i - (n - step.num_logits));
      const std::vector<int32_t> prompt(history.begin(), history.end() - static_cast<int64_t>(index));
      const std::vector<int32_t> reply = script_(prompt);
      output.sampled.push_back(index < reply.size() ? reply[index] : config_.eos_token_ids.at(0));
    }
  }
}

}  // namespace moeserve::testing
