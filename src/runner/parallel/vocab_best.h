// The distributed argmax of an unembedding split by vocabulary (rank_shard.h: rank r holds the logits of
// split_range(vocab, size, r)), shared by the CPU ranks (runner/cpu/vocab_parallel.h) and the CUDA ranks' kernels
// (runner/cuda/vocab_parallel.cu), so both merge by one rule: each rank gives, per row, the first maximum of its
// slice as (value, global id); the ranks' bests are all-gathered in rank order ([rank][row]) and the row's token is
// the first rank's among the equal best. Slices ascend with the rank, so that is the lowest id among the maxima,
// as an argmax over the whole row finds (for rows free of NaN).
#pragma once

#include <cstdint>

#include "util/host_device.h"

namespace moeserve {

struct VocabBest {
  float value;
  int32_t token;  // global id
};

// Row `row`'s winner among the ranks' bests `all` ([ranks][rows]).
inline MOESERVE_HOST_DEVICE VocabBest merge_vocab_best(const VocabBest* all, int64_t rows, int ranks, int64_t row) {
  VocabBest winner = all[row];
  for (int rank = 1; rank < ranks; ++rank)
    if (all[rank * rows + row].value > winner.value) winner = all[rank * rows + row];
  return winner;
}

}  // namespace moeserve
