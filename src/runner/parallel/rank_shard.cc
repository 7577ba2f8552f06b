#include "runner/parallel/rank_shard.h"

#include <algorithm>

#include "model/mxfp4.h"
#include "util/error.h"

namespace moeserve {

namespace {
// Ranks one process drives: the GPUs of one host (8 on the largest), or as many CPU rank threads.
constexpr int kMaxRanks = 64;
}  // namespace

IndexRange split_range(int64_t total, int parts, int index) {
  MOESERVE_CHECK(parts > 0 && index >= 0 && index < parts && total >= 0, "piece {} of {} pieces of {} items", index,
                 parts, total);
  const int64_t base = total / parts, longer = total % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, longer);
  return {begin, begin + base + (index < longer ? 1 : 0)};
}

void check_parallel_size(const ParallelConfig& parallel) {
  const int n = parallel.tensor_parallel_size;
  MOESERVE_CHECK(n >= 1 && n <= kMaxRanks, "--tensor-parallel-size {} is outside [1, {}]", n, kMaxRanks);
  MOESERVE_CHECK(!parallel.expert_parallel || n > 1,
                 "--enable-expert-parallel places experts over the --tensor-parallel-size ranks: give a size above 1");
}

void check_parallel_config(const ModelConfig& config, const ParallelConfig& parallel) {
  check_parallel_size(parallel);
  const int n = parallel.tensor_parallel_size;
  MOESERVE_CHECK(config.num_kv_heads % n == 0,
                 "Total number of key-value heads ({}) must be divisible by tensor parallel size ({})",
                 config.num_kv_heads, n);
  if (parallel.expert_parallel)
    MOESERVE_CHECK(config.num_experts >= n, "{} experts cannot be placed over {} expert-parallel ranks",
                   config.num_experts, n);
  else
    MOESERVE_CHECK(config.intermediate_size / kMxfp4BlockSize >= n,
                   "intermediate_size {} has {} MXFP4 blocks of {}: too few to split over tensor parallel size {} "
                   "(try --enable-expert-parallel)",
                   config.intermediate_size, config.intermediate_size / kMxfp4BlockSize, kMxfp4BlockSize, n);
  MOESERVE_CHECK(config.vocab_size >= n, "vocabulary of {} over tensor parallel size {}", config.vocab_size, n);
}

RankShard rank_shard(const ModelConfig& config, const ParallelConfig& parallel, int rank) {
  check_parallel_config(config, parallel);
  const int n = parallel.tensor_parallel_size;
  MOESERVE_CHECK(rank >= 0 && rank < n, "rank {} of tensor parallel size {}", rank, n);
  RankShard shard;
  shard.rank = rank;
  shard.size = n;
  shard.expert_parallel = parallel.expert_parallel;
  shard.kv_heads = split_range(config.num_kv_heads, n, rank);
  const int per_kv = config.heads_per_kv();
  shard.heads = {shard.kv_heads.begin * per_kv, shard.kv_heads.end * per_kv};
  if (parallel.expert_parallel) {
    shard.intermediate = {0, config.intermediate_size};
    shard.experts = split_range(config.num_experts, n, rank);
  } else {
    const IndexRange blocks = split_range(config.intermediate_size / kMxfp4BlockSize, n, rank);
    shard.intermediate = {blocks.begin * kMxfp4BlockSize, blocks.end * kMxfp4BlockSize};
    shard.experts = {0, config.num_experts};
  }
  shard.vocab = split_range(config.vocab_size, n, rank);
  return shard;
}

ModelConfig rank_model_config(const ModelConfig& config, const RankShard& shard) {
  ModelConfig c = config;
  c.num_heads = static_cast<int>(shard.heads.size());
  c.num_kv_heads = static_cast<int>(shard.kv_heads.size());
  c.intermediate_size = static_cast<int>(shard.intermediate.size());
  return c;
}

}  // namespace moeserve
