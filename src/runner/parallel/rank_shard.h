// The slice of a GPT-OSS model that one rank of a tensor- or expert-parallel group holds (communicator.h's
// ParallelConfig), and the checks that the model divides as asked, in vLLM's words.
//
// Tensor parallel (Megatron's layout): query and KV heads split by KV-head group, so each rank attends on its own
// heads with its own slice of the KV cache; the attention output projection split by its input columns, its partial
// results summed over the ranks (all-reduce) before the residual add. Each expert's intermediate dimension split
// in whole MXFP4 blocks of 32 (gate/up rows of the first projection, input columns of the second), the experts'
// weighted outputs summed over the ranks. The unembedding split by vocabulary: logits gathered, or, when every row
// is greedy and no logits are wanted, a distributed argmax. Biases added after a sum are added by rank 0 alone.
// Expert parallel: attention as above; each rank runs whole experts (its contiguous share of them) on every token,
// and the same sum combines them: with the tokens already on every rank after the attention all-reduce, dispatch
// is a local selection, and only attention data-parallel would make an all-to-all pay.
#pragma once

#include "model/config.h"
#include "runner/parallel/communicator.h"

namespace moeserve {

struct RankShard {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
  IndexRange heads;         // query heads
  IndexRange kv_heads;      // KV heads (heads / heads_per_kv of them)
  IndexRange intermediate;  // expert intermediate columns, whole MXFP4 blocks (all of them with expert parallelism)
  IndexRange experts;       // experts this rank runs (all of them with tensor parallelism alone)
  IndexRange vocab;         // unembedding rows
  bool adds_summed_biases() const { return rank == 0; }
};

// The shapes a rank computes with: its query and KV heads and its share of the intermediate dimension. The
// config's vocabulary stays whole (the embedding is whole on every rank); the unembedding rows a rank holds are
// shard.vocab, on the CPU and CUDA ranks alike.
ModelConfig rank_model_config(const ModelConfig& config, const RankShard& shard);

// Fails, naming the flag, for a size outside [1, 64] or expert parallelism over one rank (any model family).
void check_parallel_size(const ParallelConfig& parallel);
// Fails, naming the flag and the model's dimension, when the model does not split over the ranks as asked.
void check_parallel_config(const ModelConfig& config, const ParallelConfig& parallel);
RankShard rank_shard(const ModelConfig& config, const ParallelConfig& parallel, int rank);

}  // namespace moeserve
