#include "runner/cpu/rank_weights.h"

#include <algorithm>
#include <cstring>

#include "model/mxfp4.h"
#include "util/error.h"

namespace moeserve::cpu {

namespace {

Matrix row_slice(const Matrix& m, int64_t begin, int64_t end) {
  MOESERVE_CHECK(begin >= 0 && begin <= end && end <= m.rows, "rows [{}, {}) of a {}-row matrix", begin, end, m.rows);
  Matrix view = m;
  view.data = m.row(begin);
  view.rows = end - begin;
  return view;
}

std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t end) {
  MOESERVE_CHECK(begin >= 0 && begin <= end && end <= static_cast<int64_t>(v.size()), "[{}, {}) of {} values", begin,
                 end, v.size());
  return {v.begin() + begin, v.begin() + end};
}

// [E, width] per-expert rows, each cut to columns [begin, end).
std::vector<float> per_expert_slice(const std::vector<float>& v, int64_t experts, int64_t width, IndexRange cut) {
  std::vector<float> out;
  out.reserve(experts * cut.size());
  for (int64_t e = 0; e < experts; ++e)
    out.insert(out.end(), v.begin() + e * width + cut.begin, v.begin() + e * width + cut.end);
  return out;
}

}  // namespace

uint8_t* RankWeights::store(size_t bytes) { return storage_.emplace_back(bytes).data(); }

Matrix RankWeights::column_slice(const Matrix& m, int64_t begin, int64_t end) {
  MOESERVE_CHECK(begin >= 0 && begin <= end && end <= m.cols, "columns [{}, {}) of a {}-column matrix", begin, end,
                 m.cols);
  const size_t element = dtype_size(m.dtype), row_bytes = (end - begin) * element;
  uint8_t* data = store(m.rows * row_bytes);
  for (int64_t r = 0; r < m.rows; ++r) std::memcpy(data + r * row_bytes, m.row(r) + begin * element, row_bytes);
  return {m.dtype, data, m.rows, end - begin};
}

// Output rows [rows.begin, rows.end) of every expert (mlp1's interleaved gate/up rows of this rank's columns).
ExpertMatrix RankWeights::expert_output_slice(const ExpertMatrix& m, IndexRange rows) {
  ExpertMatrix out = m;
  out.out_features = rows.size();
  out.bias = per_expert_slice(m.bias, m.num_experts, m.out_features, rows);
  const int64_t E = m.num_experts, K = m.in_features;
  if (m.format == ExpertFormat::mxfp4) {
    const int64_t row_blocks = K / kMxfp4BlockSize;
    const size_t block_row_bytes = row_blocks * kMxfp4BlockBytes;
    uint8_t* blocks = store(E * rows.size() * block_row_bytes);
    uint8_t* scales = store(E * rows.size() * row_blocks);
    for (int64_t e = 0; e < E; ++e) {
      std::memcpy(blocks + e * rows.size() * block_row_bytes,
                  m.blocks + (e * m.out_features + rows.begin) * block_row_bytes, rows.size() * block_row_bytes);
      std::memcpy(scales + e * rows.size() * row_blocks, m.scales + (e * m.out_features + rows.begin) * row_blocks,
                  rows.size() * row_blocks);
    }
    out.blocks = blocks;
    out.scales = scales;
  } else {  // dense [E * in, out]: the output rows are columns here
    out.dense = column_slice(m.dense, rows.begin, rows.end);
  }
  return out;
}

// Input columns [columns.begin, columns.end) of every expert (mlp2's share of the intermediate dimension).
ExpertMatrix RankWeights::expert_input_slice(const ExpertMatrix& m, IndexRange columns) {
  MOESERVE_CHECK(columns.begin % kMxfp4BlockSize == 0 && columns.end % kMxfp4BlockSize == 0,
                 "input columns [{}, {}) are not whole MXFP4 blocks", columns.begin, columns.end);
  ExpertMatrix out = m;
  out.in_features = columns.size();
  const int64_t E = m.num_experts, N = m.out_features;
  if (m.format == ExpertFormat::mxfp4) {
    const int64_t row_blocks = m.in_features / kMxfp4BlockSize, kept = columns.size() / kMxfp4BlockSize;
    const int64_t first = columns.begin / kMxfp4BlockSize;
    uint8_t* blocks = store(E * N * kept * kMxfp4BlockBytes);
    uint8_t* scales = store(E * N * kept);
    for (int64_t row = 0; row < E * N; ++row) {
      std::memcpy(blocks + row * kept * kMxfp4BlockBytes, m.blocks + (row * row_blocks + first) * kMxfp4BlockBytes,
                  kept * kMxfp4BlockBytes);
      std::memcpy(scales + row * kept, m.scales + row * row_blocks + first, kept);
    }
    out.blocks = blocks;
    out.scales = scales;
  } else {  // dense [E * in, out]: the input columns are rows of each expert's block
    const size_t row_bytes = N * dtype_size(m.dense.dtype);
    uint8_t* data = store(E * columns.size() * row_bytes);
    for (int64_t e = 0; e < E; ++e)
      std::memcpy(data + e * columns.size() * row_bytes, m.dense.row(e * m.in_features + columns.begin),
                  columns.size() * row_bytes);
    out.dense = {m.dense.dtype, data, E * columns.size(), N};
  }
  return out;
}

RankWeights::RankWeights(const ModelWeights& full, const ModelConfig& config, const RankShard& shard,
                         Vocabulary vocabulary) {
  const int64_t D = config.head_dim;
  const IndexRange q_rows{shard.heads.begin * D, shard.heads.end * D};
  const IndexRange kv_rows{shard.kv_heads.begin * D, shard.kv_heads.end * D};
  weights_.embedding = full.embedding;
  weights_.final_norm = full.final_norm;
  weights_.unembedding = vocabulary == Vocabulary::whole ? full.unembedding
                                                        : row_slice(full.unembedding, shard.vocab.begin, shard.vocab.end);
  for (const LayerWeights& layer : full.layers) {
    LayerWeights& w = weights_.layers.emplace_back();
    w.attn_norm = layer.attn_norm;
    w.q = row_slice(layer.q, q_rows.begin, q_rows.end);
    w.k = row_slice(layer.k, kv_rows.begin, kv_rows.end);
    w.v = row_slice(layer.v, kv_rows.begin, kv_rows.end);
    w.o = column_slice(layer.o, q_rows.begin, q_rows.end);
    w.q_bias = slice(layer.q_bias, q_rows.begin, q_rows.end);
    w.k_bias = slice(layer.k_bias, kv_rows.begin, kv_rows.end);
    w.v_bias = slice(layer.v_bias, kv_rows.begin, kv_rows.end);
    w.o_bias = shard.adds_summed_biases() ? layer.o_bias : std::vector<float>(layer.o_bias.size(), 0.0f);
    w.sinks = slice(layer.sinks, shard.heads.begin, shard.heads.end);
    w.mlp_norm = layer.mlp_norm;
    w.router = layer.router;
    w.router_bias = layer.router_bias;
    if (shard.expert_parallel) {  // whole experts: the runner skips those of other ranks
      w.mlp1 = layer.mlp1;
      w.mlp2 = layer.mlp2;
      continue;
    }
    w.mlp1 = expert_output_slice(layer.mlp1, {2 * shard.intermediate.begin, 2 * shard.intermediate.end});
    w.mlp2 = expert_input_slice(layer.mlp2, shard.intermediate);
    if (!shard.adds_summed_biases()) std::fill(w.mlp2.bias.begin(), w.mlp2.bias.end(), 0.0f);
  }
}

}  // namespace moeserve::cpu
