#include "runner/cpu/vocab_parallel.h"

#include <algorithm>
#include <cstring>

#include "runner/parallel/vocab_best.h"
#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve::cpu {

bool needs_whole_logits(const ForwardBatch& batch, const StepTokens& step) {
  if (batch.return_logits) return true;
  for (const SequenceStep* s : step.logit_steps)
    if (s->top_logprobs >= 0 || !s->logprob_tokens.empty() || !s->logit_edits.empty() || !s->allowed_tokens.empty() ||
        (s->sampling != nullptr && !s->sampling->greedy()))
      return true;
  return false;
}

void gather_vocab_rows(Communicator& communicator, std::span<const float> local, int64_t rows, int64_t vocab,
                       std::vector<float>& whole) {
  const int n = communicator.size();
  const IndexRange mine = split_range(vocab, n, communicator.rank());
  MOESERVE_CHECK(static_cast<int64_t>(local.size()) == rows * mine.size(), "{} logits for {} rows of a {}-token slice",
                 local.size(), rows, mine.size());
  // Every rank sends rows x the longest slice, so the pieces are of equal size.
  const int64_t longest = split_range(vocab, n, 0).size();
  std::vector<float> piece(rows * longest, 0.0f), pieces(rows * longest * n);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(local.data() + r * mine.size(), mine.size(), piece.data() + r * longest);
  communicator.all_gather(std::as_bytes(std::span<const float>(piece)), std::as_writable_bytes(std::span<float>(pieces)));
  whole.resize(rows * vocab);
  for (int rank = 0; rank < n; ++rank) {
    const IndexRange slice = split_range(vocab, n, rank);
    const float* from = pieces.data() + rank * rows * longest;
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(from + r * longest, slice.size(), whole.data() + r * vocab + slice.begin);
  }
}

std::vector<int32_t> vocab_parallel_greedy(Communicator& communicator, const StepTokens& step,
                                           std::span<const float> local, int64_t vocab) {
  const int n = communicator.size();
  const IndexRange mine = split_range(vocab, n, communicator.rank());
  const int64_t rows = static_cast<int64_t>(step.logit_rows.size());
  MOESERVE_CHECK(static_cast<int64_t>(local.size()) == rows * mine.size(), "{} logits for {} rows of a {}-token slice",
                 local.size(), rows, mine.size());
  std::vector<VocabBest> best(rows), all(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t token = argmax(local.subspan(r * mine.size(), mine.size()));
    best[r] = {local[r * mine.size() + token], static_cast<int32_t>(mine.begin + token)};
  }
  communicator.all_gather(std::as_bytes(std::span<const VocabBest>(best)), std::as_writable_bytes(std::span<VocabBest>(all)));
  std::vector<int32_t> sampled(rows, -1);
  for (int64_t r = 0; r < rows; ++r) {
    if (!row_samples(*step.logit_steps[r], step.logit_rows_in_step[r])) continue;
    sampled[r] = merge_vocab_best(all.data(), rows, n, r).token;
  }
  return sampled;
}

}  // namespace moeserve::cpu
