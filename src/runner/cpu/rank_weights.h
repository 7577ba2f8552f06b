// One rank's slice of a GPT-OSS checkpoint's weights (runner/parallel/rank_shard.h says which). Row slices stay
// views into the mapped checkpoint; column slices and per-expert slices are copied once, at construction, into
// storage this object owns. Biases that are added after a cross-rank sum are kept by rank 0 and zero elsewhere.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "runner/parallel/rank_shard.h"

namespace moeserve::cpu {

enum class Vocabulary { sliced, whole };  // the unembedding: the rank's rows, or all of them

class RankWeights {
 public:
  RankWeights(const ModelWeights& full, const ModelConfig& config, const RankShard& shard,
              Vocabulary vocabulary = Vocabulary::sliced);
  RankWeights(const RankWeights&) = delete;
  RankWeights& operator=(const RankWeights&) = delete;

  const ModelWeights& weights() const { return weights_; }

 private:
  Matrix column_slice(const Matrix& m, int64_t begin, int64_t end);
  ExpertMatrix expert_output_slice(const ExpertMatrix& m, IndexRange rows);
  ExpertMatrix expert_input_slice(const ExpertMatrix& m, IndexRange columns);
  uint8_t* store(size_t bytes);

  ModelWeights weights_;
  std::vector<std::vector<uint8_t>> storage_;
};

}  // namespace moeserve::cpu
