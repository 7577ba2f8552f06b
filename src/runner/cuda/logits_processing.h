// Logits processing and logprobs on the GPU, so that neither a penalised draw nor a logprob needs the logits row
// on the host: the CPU references are moeserve::apply_logit_edits and moeserve::token_logprobs
// (sampling/logits_processing.h, sampling/logprobs.h), whose rules these kernels follow. A step runs, after the
// logits (and every row's argmax) are made:
//   1. launch_row_logprobs over the rows that want logprobs: the raw row's log-sum-exp and its top k;
//   2. launch_logit_edits over the rows that sample with edits: the edits in place (each edited token's raw
//      logit kept in `originals`), then the allowed-token mask;
//   3. argmax again for greedy edited rows, the sampling kernel for the others;
//   4. launch_chosen_logprobs: the chosen token (given, or the one drawn in 3) at its raw logit minus the
//      log-sum-exp.
// Only LogprobResult (top k <= 20 ids and values per row) comes back to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sampling/logit_edit.h"

namespace moeserve::cuda {

// One row's edits: edits[first_edit, + num_edits) (ascending tokens), and its mask at masks + mask_offset
// (-1: no mask).
struct EditRow {
  int32_t row = 0;
  int32_t first_edit = 0;
  int32_t num_edits = 0;
  int64_t mask_offset = -1;  // in 32-bit words
};

struct LogprobRow {
  int32_t row = 0;
  int32_t token = -1;  // the token to score; -1: the row's drawn token (sampled[row])
  int32_t top_k = 0;
  int32_t first_edit = 0;  // the row's edits, to find the drawn token's raw logit
  int32_t num_edits = 0;
};

struct LogprobResult {
  double log_sum_exp = 0;
  int32_t token = -1;
  float logprob = 0;
  int32_t top_tokens[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// results[i] gets rows[i]'s log-sum-exp and top rows[i].top_k tokens (by value, then ascending id).
void launch_row_logprobs(cudaStream_t stream, const float* logits, int V, const LogprobRow* rows, int n,
                         LogprobResult* results);
// Applies rows[i]'s edits and mask to its logits row in place; originals[j] gets edits[j]'s token's logit before.
void launch_logit_edits(cudaStream_t stream, float* logits, int V, const EditRow* rows, int n, const LogitEdit* edits,
                        const uint32_t* masks, float* originals);
// results[i].token / .logprob: the scored (or drawn) token and its raw logprob.
void launch_chosen_logprobs(cudaStream_t stream, const float* logits, int V, const LogprobRow* rows, int n,
                            const LogitEdit* edits, const float* originals, const int32_t* sampled,
                            LogprobResult* results);

}  // namespace moeserve::cuda
