// What the CPU draft heads share (the EAGLE-3 head, DeepSeek's MTP module): each call rolls a sequence back to the
// call's start position, extends the head's own paged KV over the newly verified positions with the target's
// features (all sequences in one batch), then drafts a chain or an EAGLE-2/3 dynamic tree (eagle3_tree.h), one
// head forward per depth for all drafting sequences. Speculative KV lives in scratch slots past the committed
// length and is dropped before returning.
//
// Alignment (drafter.h): draft position p takes the target's feature at p and the token at p + 1. A node at depth
// t sits at position root + t and is fed at position root + t - 1 with its token and the state that its parent's
// row produced (the last verified row's for depth 1). A subclass defines the head: how features become the state
// a row is fed, the row forward (which writes the row's KV and returns its state), and draft log-probabilities.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runner/draft_kv.h"
#include "runner/drafter.h"

namespace moeserve::speculative {

class TreeDrafter : public Drafter {
 public:
  void propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) override {
    propose_scored(inputs, out, nullptr);
  }
  // propose(), also giving each draft node's cumulative draft log-probability (parallel to out[i].tokens): the
  // numbers the tree search ranked by, which the tests check against a plain re-computation.
  void propose_scored(std::span<const DraftInput> inputs, std::vector<DraftTree>& out,
                      std::vector<std::vector<float>>* scores);
  void release(uint64_t sequence_id) override { kv_tables_.release(sequence_id); }
  int32_t match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) override {
    return kv_tables_.match_prefix(sequence_id, tokens);
  }

  // Positions of the sequence whose KV the drafter holds (0 for one it does not know).
  int32_t cached_positions(uint64_t sequence_id) const { return kv_tables_.cached_positions(sequence_id); }
  int64_t free_blocks() const { return kv_tables_.num_available(); }

 protected:
  using SequenceKv = DraftSequenceKv;
  // One token through the head: its RoPE position, the KV slot it writes and the slots it attends to (all of
  // [0, prefix), then `extra`, which ends with its own slot).
  struct Row {
    SequenceKv* kv;
    int32_t token;
    int32_t position;
    int32_t slot;
    int32_t prefix;
    std::vector<int32_t> extra;
  };

  // owner names the head in errors; a pool of num_blocks blocks of block_size positions, slot_floats floats each.
  TreeDrafter(std::string owner, int block_size, int64_t num_blocks, int64_t slot_floats);
  // The KV of one position of a sequence: slot_floats floats.
  float* kv_slot(const SequenceKv& kv, int32_t slot);

  virtual int64_t feature_width() const = 0;  // DraftInput::features floats per position
  virtual int64_t state_width() const = 0;    // floats of the state a row is fed and produces
  virtual int32_t target_vocab() const = 0;
  virtual size_t draft_vocab() const = 0;
  // features [n, feature_width()] -> the states the rows are fed, g [n, state_width()].
  virtual void fuse_features(const float* features, int64_t n, float* g) = 0;
  // The head over rows fed g [R, state_width()]: writes the rows' KV and their states into h [R, state_width()].
  virtual void forward_rows(const std::vector<Row>& rows, const float* g, float* h) = 0;
  // Draft log-probabilities [R, draft_vocab()] of the states h [R, state_width()].
  virtual void draft_log_probs(const float* h, int64_t R, std::vector<float>& out) = 0;
  virtual int32_t to_target(int32_t draft_id) const { return draft_id; }

  // Rolls each sequence back to its start position and runs its newly verified positions; returns their states
  // [rows, state] and, per input, the row of its last position (-1 for none).
  std::vector<float> extend(std::span<const DraftInput> inputs, std::vector<int64_t>& last_row);

 private:
  struct Drafting;
  // Runs every sequence's frontier nodes as one batch and expands the trees; false once no frontier is left.
  bool expand_frontiers(std::vector<Drafting>& drafting, std::span<const DraftInput> inputs);

  std::string owner_;
  int64_t slot_floats_;
  DraftKvTables kv_tables_;
  std::vector<float> kv_cache_;  // [num_blocks, block_size, slot_floats]
};

}  // namespace moeserve::speculative
