// One forward step's batch description flattened into int32 arrays for the device (token ids, positions,
// sequences, logits rows, prefill query tiles, decode query groups, tree masks, block tables), checked as the CPU
// runner checks it. A step's attention runs in two launches over disjoint tokens: sequences of at least
// `prefill_min_rows` tokens through the prefill kernel's 64-row query tiles, the others (decode tokens, verify
// runs, short chunks) through the decode kernel's query groups. The arrays sit at offsets that depend only on
// (tokens, sequences, rows, query tiles, decode groups, whether a tree is in the step), with the block tables last
// and their stride stored on the device, so a graph captured for a (batch size, tokens a sequence) bucket replays
// with any tables (graphs never hold a tree step).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/cuda/kernels.h"
#include "runner/runner.h"

namespace moeserve::cuda {

// Query rows per sequence from which prefill attention (64-row tiles) beats the decode kernel's 16-row groups.
inline constexpr int kPrefillAttentionRows = 16;
inline constexpr int kNoPrefillTiles = 0;  // prefill_min_rows: every sequence through the decode groups

struct StepRow {
  int32_t token = 0;                      // row of the token in the step
  const SequenceStep* step = nullptr;     // its sequence (null for graph padding)
  uint64_t sample_index = 0;
};

class StepMetadata {
 public:
  // pad_to > 0: uniform causal batches only (decode, and chain verify steps): every sequence has pad_len tokens
  // and pad_len logits rows, no tree; padded up to pad_to sequences with pad_len-token sequences at positions 0 ..
  // pad_len - 1 whose block tables point at padding_block. prefill_min_rows > 0: sequences of at least that many
  // tokens get prefill query tiles; the others (all, with kNoPrefillTiles) decode query groups.
  void build(const ForwardBatch& batch, const ModelConfig& config, const KvGroups& groups, const KvCacheLayout& kv,
             int pad_to, int pad_len, int32_t padding_block, int prefill_min_rows);

  // The arrays, as pointers into a device copy of host().
  StepView view(const int32_t* device) const;
  const int32_t* logits_rows(const int32_t* device) const { return device + rows_at_; }
  const std::vector<int32_t>& host() const { return data_; }

  int num_tokens() const { return tokens_; }
  int num_seqs() const { return seqs_; }
  int max_q_len() const { return max_q_len_; }
  int num_q_tiles() const { return q_tiles_; }
  int num_decode_groups() const { return decode_groups_; }
  bool has_tree() const { return has_tree_; }
  const std::vector<StepRow>& rows() const { return rows_; }  // logits rows, real ones first

 private:
  // Positions and tree masks of a tree sequence whose first token is step row `first`.
  void write_tree(std::span<const int32_t> parent, int32_t start, int window, int32_t first);

  std::vector<int32_t> data_;
  std::vector<StepRow> rows_;
  int tokens_ = 0, seqs_ = 0, groups_ = 0, q_tiles_ = 0, decode_groups_ = 0, max_q_len_ = 0;
  bool has_tree_ = false;
  size_t ids_at_ = 0, positions_at_ = 0, token_seq_at_ = 0, q_start_at_ = 0, q_len_at_ = 0, context_at_ = 0,
         rows_at_ = 0, tile_seq_at_ = 0, tile_row0_at_ = 0, decode_token0_at_ = 0, tree_masks_at_ = 0, tables_at_ = 0;
};

}  // namespace moeserve::cuda
