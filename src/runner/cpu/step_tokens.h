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
  // Logits rows: the batch index of each row's token, its sequence step and its sampling stream position.
  std::vector<int64_t> logit_rows;
  std::vector<const SequenceStep*> logit_steps;
  std::vector<uint64_t> sample_indices;
};

// Fails naming the sequence for block tables that do not match the KV groups, a num_logits out of range, positions
// past the model's context, token ids outside the vocabulary, or tree parents that are not earlier tokens.
StepTokens collect_step_tokens(const ForwardBatch& batch, int num_kv_groups, int vocab_size, int64_t max_positions);

// Slots of the keys token t attends to, in position order: the cached prefix from position `lo` on, then (tree
// steps) its ancestors root first while at or after `lo`, or (causal runs) the step's tokens up to itself.
void key_slots(const SequenceStep& step, const StepToken& token, int32_t lo, std::vector<int32_t>& slots);

// Samples one token from every logits row whose step has sampling parameters (-1 for the others) into
// output.sampled; output.logits holds the rows.
void sample_logit_rows(const StepTokens& tokens, int vocab_size, ForwardOutput& output);

}  // namespace moeserve::cpu
