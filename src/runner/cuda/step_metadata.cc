#include "runner/cuda/step_metadata.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

// runner.h's rules for tree_parent, as the CPU runner checks them, and the masks' size limit.
void check_tree(std::span<const int32_t> parent, int64_t tokens, int seq) {
  MOESERVE_CHECK(static_cast<int64_t>(parent.size()) == tokens, "sequence {}: {} tree parents for {} tokens", seq,
                 parent.size(), tokens);
  MOESERVE_CHECK(tokens <= kMaxTreeTokens,
                 "sequence {}: a tree step of {} tokens; the CUDA runner verifies trees of at most {} tokens (one "
                 "64-bit ancestor mask per token)",
                 seq, tokens, kMaxTreeTokens);
  for (int64_t i = 0; i < tokens; ++i)
    MOESERVE_CHECK(parent[i] >= -1 && parent[i] < i, "sequence {}: token {} has tree parent {} (must be -1 or earlier)",
                   seq, i, parent[i]);
}

}  // namespace

// Token i of the tree sits at position start + depth(i). Its full-layer mask holds itself and its ancestors; its
// sliding-layer mask those of them whose positions are inside its window, the `window` nearest (as CpuRunner's
// key_slots keeps ancestors going up while position >= position(i) - window + 1).
void StepMetadata::write_tree(std::span<const int32_t> parent, int32_t start, int window, int32_t first) {
  const int32_t n = static_cast<int32_t>(parent.size());
  std::vector<int32_t> depth(n);
  std::vector<uint64_t> full(n);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t up = parent[i];
    depth[i] = up < 0 ? 0 : depth[up] + 1;
    full[i] = (up < 0 ? 0 : full[up]) | uint64_t{1} << i;
    uint64_t sliding = 0;
    int32_t steps = 0;
    for (int32_t j = i; j >= 0 && steps < window; j = parent[j], ++steps) sliding |= uint64_t{1} << j;
    const size_t token = static_cast<size_t>(first + i);
    data_[positions_at_ + token] = start + depth[i];
    int32_t* masks = data_.data() + tree_masks_at_ + token * 4;
    for (const uint64_t mask : {full[i], sliding}) {
      *masks++ = static_cast<int32_t>(static_cast<uint32_t>(mask));
      *masks++ = static_cast<int32_t>(static_cast<uint32_t>(mask >> 32));
    }
  }
}

void StepMetadata::build(const ForwardBatch& batch, const ModelConfig& c, const KvGroups& groups,
                         const KvCacheLayout& kv, int pad_to, int pad_len, int32_t padding_block,
                         int prefill_min_rows) {
  const int real_seqs = static_cast<int>(batch.sequences.size());
  seqs_ = std::max(real_seqs, pad_to);
  groups_ = groups.num_groups();
  tokens_ = 0;
  max_q_len_ = 0;
  has_tree_ = false;
  int64_t stride = 1;
  for (int s = 0; s < real_seqs; ++s) {
    const SequenceStep& step = batch.sequences[s];
    const int64_t n = static_cast<int64_t>(step.tokens.size());
    MOESERVE_CHECK(n > 0, "sequence {}: no tokens in the step", s);
    if (!step.tree_parent.empty()) {
      check_tree(step.tree_parent, n, s);
      has_tree_ = true;
    }
    MOESERVE_CHECK(static_cast<int>(step.block_tables.size()) == groups_, "sequence {}: {} block tables for {} KV groups",
                   s, step.block_tables.size(), groups_);
    MOESERVE_CHECK(step.num_logits >= 0 && step.num_logits <= n, "sequence {}: num_logits {} for {} tokens", s,
                   step.num_logits, n);
    const int64_t end = step.start_position + n;
    MOESERVE_CHECK(step.start_position >= 0 && end <= c.max_position_embeddings,
                   "sequence {}: positions {}..{} exceed the model's context of {}", s, step.start_position, end,
                   c.max_position_embeddings);
    for (int32_t id : step.tokens)
      MOESERVE_CHECK(id >= 0 && id < c.vocab_size, "sequence {}: token id {} is outside the vocabulary of {}", s, id,
                     c.vocab_size);
    // Every position this step reads or writes must have a block: the window's for sliding groups, all for full.
    const int64_t needed_blocks = (end + kv.block_size - 1) / kv.block_size;
    for (int g = 0; g < groups_; ++g) {
      const auto& table = step.block_tables[g];
      MOESERVE_CHECK(static_cast<int64_t>(table.size()) >= needed_blocks,
                     "sequence {}: block table of KV group {} has {} blocks, position {} needs {}", s, g, table.size(),
                     end - 1, needed_blocks);
      const bool sliding = groups.kind_of_group[g] == AttentionKind::sliding;
      const int64_t first = sliding ? std::max<int64_t>(0, step.start_position - c.sliding_window + 1) : 0;
      for (int64_t b = first / kv.block_size; b < needed_blocks; ++b)
        MOESERVE_CHECK(table[b] >= 0 && table[b] < kv.num_blocks,
                       "sequence {}: KV block {} (group {}, logical block {}) is not in the pool of {}", s, table[b], g,
                       b, kv.num_blocks);
    }
    stride = std::max(stride, needed_blocks);
    tokens_ += static_cast<int>(n);
    max_q_len_ = std::max<int>(max_q_len_, static_cast<int>(n));
  }
  if (pad_to > 0) {
    MOESERVE_CHECK(pad_len >= 1 && !has_tree_, "graph padding is for causal batches only");
    for (const SequenceStep& step : batch.sequences)
      MOESERVE_CHECK(static_cast<int>(step.tokens.size()) == pad_len && step.num_logits == pad_len,
                     "graph padding to {}-token sequences: a sequence has {} tokens and {} logits rows", pad_len,
                     step.tokens.size(), step.num_logits);
  }
  const int padding_len = pad_to > 0 ? pad_len : 1;
  const int T = tokens_ + (seqs_ - real_seqs) * padding_len;

  rows_.clear();
  int32_t first = 0;
  for (const SequenceStep& step : batch.sequences) {
    const int32_t n = static_cast<int32_t>(step.tokens.size());
    for (int32_t j = n - step.num_logits; j < n; ++j)
      rows_.push_back({first + j, &step, row_sample_index(step, j - (n - step.num_logits))});
    first += n;
  }
  for (int s = real_seqs; s < seqs_; ++s)
    for (int j = 0; j < padding_len; ++j) rows_.push_back({first++, nullptr, 0});
  const int R = static_cast<int>(rows_.size());

  // Query tiles for the long sequences, decode groups (first tokens) for the rest, graph padding included.
  std::vector<std::pair<int32_t, int32_t>> tiles;
  std::vector<int32_t> decode_token0;
  const int group_tokens = decode_group_tokens(c.heads_per_kv());
  for (int s = 0, token = 0; s < seqs_; ++s) {
    const int32_t n = s < real_seqs ? static_cast<int32_t>(batch.sequences[s].tokens.size()) : padding_len;
    if (prefill_min_rows > 0 && n >= prefill_min_rows)
      for (int32_t r = 0; r < n; r += kPrefillTileRows) tiles.emplace_back(s, r);
    else
      for (int32_t r = 0; r < n; r += group_tokens) decode_token0.push_back(token + r);
    token += n;
  }
  q_tiles_ = static_cast<int>(tiles.size());
  decode_groups_ = static_cast<int>(decode_token0.size());

  size_t at = 1;  // data_[0]: the table stride
  auto place = [&](size_t count) {
    size_t here = at;
    at += count;
    return here;
  };
  ids_at_ = place(T);
  positions_at_ = place(T);
  token_seq_at_ = place(T);
  q_start_at_ = place(seqs_);
  q_len_at_ = place(seqs_);
  context_at_ = place(seqs_);
  rows_at_ = place(R);
  tile_seq_at_ = place(q_tiles_);
  tile_row0_at_ = place(q_tiles_);
  decode_token0_at_ = place(decode_groups_);
  tree_masks_at_ = place(has_tree_ ? static_cast<size_t>(T) * 4 : 0);
  tables_at_ = place(static_cast<size_t>(seqs_) * groups_ * stride);
  data_.assign(at, -1);
  data_[0] = static_cast<int32_t>(stride);

  int32_t token = 0;
  for (int s = 0; s < seqs_; ++s) {
    const bool real = s < real_seqs;
    const SequenceStep* step = real ? &batch.sequences[s] : nullptr;
    const int32_t n = real ? static_cast<int32_t>(step->tokens.size()) : padding_len;
    const int32_t start = real ? step->start_position : 0;
    data_[q_start_at_ + s] = token;
    data_[q_len_at_ + s] = n;
    data_[context_at_ + s] = start + n;
    for (int32_t i = 0; i < n; ++i, ++token) {
      data_[ids_at_ + token] = real ? step->tokens[i] : 0;
      data_[positions_at_ + token] = start + i;
      data_[token_seq_at_ + token] = s;
    }
    // Tree masks start as all ones (data_ is filled with -1), what a causal sequence's tokens need.
    if (real && !step->tree_parent.empty()) write_tree(step->tree_parent, start, c.sliding_window, token - n);
    for (int g = 0; g < groups_; ++g) {
      int32_t* table = data_.data() + tables_at_ + (static_cast<size_t>(s) * groups_ + g) * stride;
      if (!real) {
        std::fill(table, table + stride, padding_block);
        continue;
      }
      const auto& source = step->block_tables[g];
      std::copy_n(source.begin(), std::min<size_t>(source.size(), stride), table);
    }
  }
  for (int r = 0; r < R; ++r) data_[rows_at_ + r] = rows_[r].token;
  for (int i = 0; i < q_tiles_; ++i) {
    data_[tile_seq_at_ + i] = tiles[i].first;
    data_[tile_row0_at_ + i] = tiles[i].second;
  }
  std::copy(decode_token0.begin(), decode_token0.end(), data_.begin() + static_cast<std::ptrdiff_t>(decode_token0_at_));
  tokens_ = T;
}

StepView StepMetadata::view(const int32_t* device) const {
  StepView v;
  v.num_tokens = tokens_;
  v.num_seqs = seqs_;
  v.num_groups = groups_;
  v.token_ids = device + ids_at_;
  v.positions = device + positions_at_;
  v.token_seq = device + token_seq_at_;
  v.seq_q_start = device + q_start_at_;
  v.seq_q_len = device + q_len_at_;
  v.seq_context = device + context_at_;
  v.table_stride = device;
  v.block_tables = device + tables_at_;
  v.q_tile_seq = device + tile_seq_at_;
  v.q_tile_row0 = device + tile_row0_at_;
  v.num_q_tiles = q_tiles_;
  v.decode_token0 = device + decode_token0_at_;
  v.num_decode_groups = decode_groups_;
  v.tree_masks = has_tree_ ? device + tree_masks_at_ : nullptr;
  return v;
}

}  // namespace moeserve::cuda
