// Runner-against-runner comparisons for the CUDA runner tests: deterministic prompts, the logits of every
// position of a batch of prompts (in one step, then in chunks over other blocks), and per-row logit errors with
// the bounds the CUDA runner is held to against the CPU runner.
#pragma once

#include <string>
#include <vector>

#include "model/gpt_oss/make_tiny.h"
#include "runner/runner.h"
#include "sampling/logit_edit.h"
#include "sampling/sampling_params.h"

namespace moeserve::testing {

std::vector<int32_t> prompt(int length, int salt, int vocab);

// A step of one sequence: `count` of `tokens` from `start` on, its KV in `table` (one group), one logits row.
// Points into `tokens` and `table`: keep them alive while the step runs.
ForwardBatch one_sequence_step(const std::vector<int32_t>& tokens, int start, int count,
                               const std::vector<int32_t>& table);

// One step of the logits-processing tests over three prompts (20, 9, 17 tokens) whose KV goes to blocks_each
// blocks a group each (sequence s, group g: blocks (s * groups + g) * blocks_each + b): a greedy row with a logit
// bias forcing token `forced`, a sampled row under an allowed-token mask of 64 tokens, and the third prompt scored
// row by row (prompt logprobs) with its last row drawing; every row with top-5 logprobs, no logits returned.
// Holds what the step's spans point into: keep it alive while the step runs.
struct ProcessedRowsStep {
  ProcessedRowsStep(int vocab, int groups, int blocks_each, int32_t forced);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<std::vector<int32_t>>> tables;  // [sequence][group]
  SamplingParams greedy, sampled;
  std::vector<LogitEdit> force;
  std::vector<uint32_t> mask;
  std::vector<int32_t> scored;
  ForwardBatch batch;
};
// The same tokens and top-5 tokens as `want`, logprobs within 1e-3 (fp32 runners, logits within 1e-4).
void expect_logprobs_match(const ForwardOutput& got, const ForwardOutput& want);

// gpt-oss-20b's dimensions (hidden 2,880, 64 query and 8 KV heads of 64 dims, window 128), two layers.
TinyModelOptions full_width_two_layers();

// Logits of every position of every prompt, in one batched step and then in chunks of `chunk` over other blocks.
struct AllLogits {
  std::vector<float> batched, chunked;
};
AllLogits run_prompts(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts, int chunk);

// Per-row ||out - ref|| / ||ref|| of logits rows, summarised.
struct RowErrors {
  double worst = 0, median = 0;
  int rows = 0, above_5e2 = 0;
};
RowErrors row_errors(const std::vector<float>& out, const std::vector<float>& ref, int vocab);

// fp32: every row within 1e-4 (the CPU's arithmetic in another order). bf16: activations and KV are rounded at
// every layer (~2e-3 per operation, see the kernel tests), and a token whose 4th and 5th router logits lie
// closer than that may take another expert than on the CPU, which moves its row by tens of percent; so the
// median row is bounded, and the worst row and the count of rows off by more than 5% are reported.
void expect_logits_close(const std::string& what, const std::string& precision, const std::vector<float>& out,
                         const std::vector<float>& ref, int vocab);

}  // namespace moeserve::testing
