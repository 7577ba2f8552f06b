// The EAGLE-3 draft head on the CPU: one Llama decoder layer over fused target features and token embeddings,
// with its own paged KV per sequence (EAGLE-3, arXiv 2503.01840; the forward of vLLM's llama_eagle3.py). The calls,
// rollback and chain or tree drafting (eagle3_tree.h) are TreeDrafter's (tree_drafter.h); a row's state is the
// layer's prenorm output.
//
// Arithmetic is the CPU runner's (runner/cpu/ops.h: fp32 over bf16/f32 weights converted exactly, dot products in
// one canonical order), so a sequence gets the same draft in any batch.
#pragma once

#include <memory>
#include <vector>

#include "model/eagle3/checkpoint.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/tree_drafter.h"
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

class Eagle3Drafter : public TreeDrafter {
 public:
  Eagle3Drafter(std::shared_ptr<const Eagle3Checkpoint> draft, Eagle3Target target, Eagle3DrafterOptions options);

  // Bytes one block of the drafter's KV pool takes: K and V of block_size tokens (fp32).
  static size_t kv_block_bytes(const Eagle3Config& config, int block_size);

  std::vector<int> aux_layers() const override { return draft_->config().aux_layer_ids; }
  const Eagle3Config& config() const { return draft_->config(); }

 private:
  int64_t feature_width() const override { return draft_->config().feature_width(); }
  int64_t state_width() const override { return draft_->config().hidden_size; }
  int32_t target_vocab() const override { return draft_->config().vocab_size; }
  size_t draft_vocab() const override { return draft_->config().draft_vocab_size; }
  // features -> [n, hidden] fused inputs.
  void fuse_features(const float* features, int64_t n, float* g) override;
  // The decoder layer over rows with inputs g [R, hidden]; writes the rows' KV and their prenorm outputs h2.
  void forward_rows(const std::vector<Row>& rows, const float* g, float* h2) override;
  void draft_log_probs(const float* h2, int64_t R, std::vector<float>& out) override;
  int32_t to_target(int32_t draft_id) const override;
  float* kv_slot(const SequenceKv& kv, int32_t slot, int which);

  std::shared_ptr<const Eagle3Checkpoint> draft_;
  Eagle3Target target_;
  Matrix embedding_;  // the draft's own, or the target's
  Matrix lm_head_;
  std::vector<float> inv_freq_;
  ThreadPool pool_threads_;
};

}  // namespace moeserve::speculative
