// A ForwardBatch as the CPU runners see it: its tokens in batch order, each with the position RoPE and masks use
// (start + index, or start + depth in a tree step) and the KV slot it writes (start + index), checked against the
// model; the rows that want logits and their sampling stream positions; and, per token, the slots of the keys it
// attends to. Shared by the GPT-OSS and DeepSeek-V3 forwards.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/runner.h"

namespace moeserve::cpu {

struct StepToken {
  int32_t sequence;
  int32_t index;     // within its sequence's step
  int32_t position;  // start + index, or start + depth in a tree step
  int32_t slot;      // where its KV goes: start + index
};

struct StepTokens {
  std::vector<StepToken> tokens;
  std::vector<int32_t> ids;
  std::vector<int32_t> positions;
  // Logits rows: the batch index of each row's token, its sequence step, its index among that step's rows and its
  // sampling stream position (row_sample_index: rows only scored for a logprob take none).
  std::vector<int64_t> logit_rows;
  std::vector<const SequenceStep*> logit_steps;
  std::vector<int32_t> logit_rows_in_step;
  std::vector<uint64_t> sample_indices;
};

// Fails naming the sequence for block tables that do not match the KV groups, a num_logits out of range, positions
// past the model's context, token ids outside the vocabulary, tree parents that are not earlier tokens, or logprob
// tokens that are not one per logits row.
StepTokens collect_step_tokens(const ForwardBatch& batch, int num_kv_groups, int vocab_size, int64_t max_positions);

// Slots of the keys token t attends to, in position order: the cached prefix from position `lo` on, then (tree
// steps) its ancestors root first while at or after `lo`, or (causal runs) the step's tokens up to itself.
void key_slots(const SequenceStep& step, const StepToken& token, int32_t lo, std::vector<int32_t>& slots);

// Every logits row of output.logits (sampling/logits_processing.h, sampling/logprobs.h): a row scored for a
// logprob token reports that token's raw logprob; a row that samples (row_samples) has its step's logit edits and
// allowed-token mask applied in place, then draws into output.sampled (-1 for the other rows) and reports the raw
// logprob of its draw when the step asks for logprobs (output.logprobs, [rows] then).
void sample_logit_rows(const StepTokens& tokens, int vocab_size, ForwardOutput& output);

}  // namespace moeserve::cpu
