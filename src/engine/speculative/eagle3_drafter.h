// The EAGLE-3 draft head on the CPU: one Llama decoder layer over fused target features and token embeddings,
// with its own paged KV per sequence (EAGLE-3, arXiv 2503.01840; the forward of vLLM's llama_eagle3.py). It implements
// Drafter: each call rolls a sequence back to the call's start position, extends the KV over the newly verified
// positions with the target's features, then drafts a chain or an EAGLE-2/3 dynamic tree (eagle3_tree.h) whose
// speculative KV is dropped before returning.
//
// Arithmetic is the CPU runner's (runner/cpu/ops.h: fp32 over bf16/f32 weights converted exactly, dot products in
// one canonical order), so a sequence gets the same draft in any batch.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/speculative/draft_kv.h"
#include "engine/speculative/drafter.h"
#include "engine/speculative/eagle3_checkpoint.h"
#include "model/checkpoint.h"
#include "util/thread_pool.h"

namespace moeserve::speculative {

// What the drafter needs of the target model: its shape, and its token embedding and unembedding for heads
// that share them. The owner keeps the matrices' memory alive.
struct Eagle3Target {
  int num_layers = 0;
  int hidden_size = 0;
  int vocab_size = 0;
  Matrix embedding;    // [vocab, hidden]
  Matrix unembedding;  // [vocab, hidden]
  std::shared_ptr<const void> owner;

  static Eagle3Target of(std::shared_ptr<const Checkpoint> checkpoint);
};

struct Eagle3DrafterOptions {
  int block_size = 16;     // token slots per KV block
  int64_t num_blocks = 0;  // blocks in the drafter's own pool (kv_block_bytes() each); must be positive
  size_t threads = 0;      // 0: one per hardware thread
};

class Eagle3Drafter : public Drafter {
 public:
  Eagle3Drafter(std::shared_ptr<const Eagle3Checkpoint> draft, Eagle3Target target, Eagle3DrafterOptions options);

  // Bytes one block of the drafter's KV pool takes: K and V of block_size tokens (fp32).
  static size_t kv_block_bytes(const Eagle3Config& config, int block_size);

  std::vector<int> aux_layers() const override { return draft_->config().aux_layer_ids; }
  void propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) override {
    propose_scored(inputs, out, nullptr);
  }
  // propose(), also giving each draft node's cumulative draft log-probability (parallel to out[i].tokens): the
  // numbers the tree search ranked by, which the tests check against a plain re-computation.
  void propose_scored(std::span<const DraftInput> inputs, std::vector<DraftTree>& out,
                      std::vector<std::vector<float>>* scores);
  void release(uint64_t sequence_id) override;
  int32_t match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) override {
    return kv_tables_.match_prefix(sequence_id, tokens);
  }

  const Eagle3Config& config() const { return draft_->config(); }
  // Positions of the sequence whose KV the drafter holds (0 for one it does not know).
  int32_t cached_positions(uint64_t sequence_id) const;
  int64_t free_blocks() const { return kv_tables_.num_available(); }

 private:
  using SequenceKv = DraftSequenceKv;
  // One token through the decoder layer: its RoPE position, the KV slot it writes and the slots it attends to
  // (all of [0, prefix), then `extra`, which ends with its own slot).
  struct Row {
    SequenceKv* kv;
    int32_t token;
    int32_t position;
    int32_t slot;
    int32_t prefix;
    std::vector<int32_t> extra;
  };

  struct Drafting;

  // Rolls each sequence back to its start position and runs its newly verified positions; returns their prenorm
  // outputs [rows, hidden] and, per input, the row of its last position (-1 for none).
  std::vector<float> extend(std::span<const DraftInput> inputs, std::vector<int64_t>& last_row);
  // Runs every sequence's frontier nodes as one batch and expands the trees; false once no frontier is left.
  bool expand_frontiers(std::vector<Drafting>& drafting, std::span<const DraftInput> inputs);
  float* kv_slot(const SequenceKv& kv, int32_t slot, int which);
  // g [n, feature_width] target features -> [n, hidden] fused inputs.
  void fuse_features(const float* features, int64_t n, float* g);
  // The decoder layer over rows with inputs g [R, hidden]; writes the rows' KV and their prenorm outputs h2.
  void forward_rows(const std::vector<Row>& rows, const float* g, float* h2);
  // Draft log-probabilities [R, draft_vocab] of prenorm outputs h2 [R, hidden].
  void draft_log_probs(const float* h2, int64_t R, std::vector<float>& out);
  int32_t to_target(int32_t draft_id) const;

  std::shared_ptr<const Eagle3Checkpoint> draft_;
  Eagle3Target target_;
  Matrix embedding_;  // the draft's own, or the target's
  Matrix lm_head_;
  std::vector<float> inv_freq_;
  ThreadPool pool_threads_;
  DraftKvTables kv_tables_;
  std::vector<float> kv_cache_;  // [num_blocks, block_size, 2, kv_dim]
};

}  // namespace moeserve::speculative
