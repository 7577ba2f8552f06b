#include "runner/cpu/step_tokens.h"

#include <algorithm>

#include "sampling/logits_processing.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve::cpu {

StepTokens collect_step_tokens(const ForwardBatch& batch, int num_kv_groups, int vocab_size, int64_t max_positions) {
  StepTokens out;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceStep& step = batch.sequences[s];
    MOESERVE_CHECK(static_cast<int>(step.block_tables.size()) == num_kv_groups,
                   "sequence {}: {} block tables for {} KV groups", s, step.block_tables.size(), num_kv_groups);
    MOESERVE_CHECK(step.num_logits >= 0 && step.num_logits <= static_cast<int32_t>(step.tokens.size()),
                   "sequence {}: num_logits {} for {} tokens", s, step.num_logits, step.tokens.size());
    MOESERVE_CHECK(step.start_position >= 0 &&
                       step.start_position + static_cast<int64_t>(step.tokens.size()) <= max_positions,
                   "sequence {}: positions {}..{} exceed the model's context of {}", s, step.start_position,
                   step.start_position + step.tokens.size(), max_positions);
    const bool tree = !step.tree_parent.empty();
    MOESERVE_CHECK(!tree || step.tree_parent.size() == step.tokens.size(), "sequence {}: {} tree parents for {} tokens",
                   s, step.tree_parent.size(), step.tokens.size());
    const size_t first = out.tokens.size();
    for (size_t i = 0; i < step.tokens.size(); ++i) {
      MOESERVE_CHECK(step.tokens[i] >= 0 && step.tokens[i] < vocab_size,
                     "sequence {}: token id {} is outside the vocabulary of {}", s, step.tokens[i], vocab_size);
      const int32_t index = static_cast<int32_t>(i);
      int32_t depth = index;
      if (tree) {
        const int32_t parent = step.tree_parent[i];
        MOESERVE_CHECK(parent >= -1 && parent < index, "sequence {}: token {} has tree parent {} (must be -1 or earlier)",
                       s, i, parent);
        depth = parent < 0 ? 0 : out.tokens[first + parent].position - step.start_position + 1;
      }
      out.tokens.push_back({static_cast<int32_t>(s), index, step.start_position + depth, step.start_position + index});
      out.ids.push_back(step.tokens[i]);
      out.positions.push_back(step.start_position + depth);
    }
    MOESERVE_CHECK(step.logprob_tokens.empty() || static_cast<int64_t>(step.logprob_tokens.size()) == step.num_logits,
                   "sequence {}: {} logprob tokens for {} logits rows", s, step.logprob_tokens.size(), step.num_logits);
    const int64_t n = static_cast<int64_t>(step.tokens.size());
    for (int64_t j = n - step.num_logits; j < n; ++j) {
      const int32_t k = static_cast<int32_t>(j - (n - step.num_logits));
      out.logit_rows.push_back(static_cast<int64_t>(first) + j);
      out.logit_steps.push_back(&step);
      out.logit_rows_in_step.push_back(k);
      out.sample_indices.push_back(row_sample_index(step, k));
    }
  }
  return out;
}

void key_slots(const SequenceStep& step, const StepToken& token, int32_t lo, std::vector<int32_t>& slots) {
  slots.clear();
  for (int32_t p = lo; p < step.start_position; ++p) slots.push_back(p);
  if (step.tree_parent.empty()) {
    for (int32_t p = std::max(lo, step.start_position); p <= token.position; ++p) slots.push_back(p);
    return;
  }
  // Ancestors from the token up, kept while at or after lo (positions only fall going up), then reversed.
  const size_t prefix = slots.size();
  int32_t position = token.position;
  for (int32_t i = token.index; i >= 0 && position >= lo; i = step.tree_parent[i], --position)
    slots.push_back(step.start_position + i);
  std::reverse(slots.begin() + static_cast<std::ptrdiff_t>(prefix), slots.end());
}

void sample_logit_rows(const StepTokens& tokens, int vocab_size, ForwardOutput& output) {
  const int64_t R = static_cast<int64_t>(tokens.logit_rows.size());
  output.sampled.assign(R, -1);
  output.logprobs.clear();
  std::vector<float> raw_row;
  for (int64_t r = 0; r < R; ++r) {
    const SequenceStep& step = *tokens.logit_steps[r];
    const std::span<float> row(output.logits.data() + r * vocab_size, static_cast<size_t>(vocab_size));
    const bool wants_logprobs = step.top_logprobs >= 0;
    if (wants_logprobs) output.logprobs.resize(R);
    const int32_t k = tokens.logit_rows_in_step[r];
    if (!step.logprob_tokens.empty() && step.logprob_tokens[k] >= 0) {  // scored, not sampled
      if (wants_logprobs) output.logprobs[r] = token_logprobs(row, step.logprob_tokens[k], step.top_logprobs);
      continue;
    }
    if (!row_samples(step, k)) continue;
    // Raw logprobs are of the logits before any edit: the row is kept aside when edits change it.
    const bool edited = !step.logit_edits.empty() || !step.allowed_tokens.empty();
    if (edited && wants_logprobs) raw_row.assign(row.begin(), row.end());
    if (edited) apply_logit_edits(row, step.logit_edits, step.allowed_tokens);
    output.sampled[r] = sample_token(row, *step.sampling, tokens.sample_indices[r]);
    if (wants_logprobs)
      output.logprobs[r] =
          token_logprobs(edited ? std::span<const float>(raw_row) : row, output.sampled[r], step.top_logprobs);
  }
}

}  // namespace moeserve::cpu
