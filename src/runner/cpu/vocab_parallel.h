// The unembedding split by vocabulary over the ranks of a parallel group (runner/parallel/rank_shard.h): each rank
// holds the logits of its contiguous slice of the vocabulary, rank r the slice split_range(vocab, size, r).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/cpu/step_tokens.h"
#include "runner/parallel/communicator.h"
#include "runner/runner.h"

namespace moeserve::cpu {

// Whether the step needs whole logits rows on a rank: they are returned, or a row is scored, asks for logprobs,
// has logit edits or a mask, or samples other than greedily. Otherwise every row is drawn by vocab_parallel_greedy.
bool needs_whole_logits(const ForwardBatch& batch, const StepTokens& step);

// Whole rows [rows, vocab] from every rank's [rows, slice] logits (every rank receives them all).
void gather_vocab_rows(Communicator& communicator, std::span<const float> local, int64_t rows, int64_t vocab,
                       std::vector<float>& whole);

// Per logits row, the greedy token over the whole vocabulary from the ranks' slices, without gathering them: each
// rank's first maximum, then the first rank's among the equal best, which is the lowest id among the maxima, as
// sampling's argmax finds on the whole row (for rows free of NaN). -1 for rows that do not sample (row_samples).
std::vector<int32_t> vocab_parallel_greedy(Communicator& communicator, const StepTokens& step,
                                           std::span<const float> local, int64_t vocab);

}  // namespace moeserve::cpu
