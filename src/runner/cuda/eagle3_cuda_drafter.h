// The EAGLE-3 draft head on the GPU: the same Drafter as speculative::Eagle3Drafter (the CPU reference, which the
// tests compare with), with bf16 weights and KV, fp32 accumulation and residual stream.
//
// A call: one upload of the rows' metadata, tokens and target features; the extend step (fc over the features,
// the decoder layer over every newly verified position; variable rows, not graphed); then
//   - chains (top_k 1): all k draft steps on the device, argmax -> d2t -> embedding -> next step, captured as one
//     CUDA graph per (batch-size bucket, k) with rows padded to the bucket (padding rows write a spare KV block),
//     replayed with new metadata in fixed device buffers; one copy of the drafted tokens back at the end;
//   - trees (top_k > 1), and every draft when scores are asked for: the host tree search (eagle3_tree.h) over
//     per-row top-k log-probabilities computed on the device and copied back per depth; a frontier node attends
//     to the committed positions and its ancestors' scratch slots.
//
// Cost of one chain draft step (synthetic gpt-oss-120b head, bf16): the weights read are qkv 5120 x 5760,
// o 2880 x 4096, gate/up 34560 x 2880, down 2880 x 17280, lm_head 32000 x 2880: 282.7 M parameters, 565 MB per
// step at any batch size, and 2 FLOP per weight per row (0.57 GFLOP per row); plus each row's KV reads (2 KiB
// per position of context). fc (2880 x 8640, 50 MB) runs only in the extend step.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/eagle3/config.h"
#include "runner/cuda/blas.h"
#include "runner/cuda/cuda_drafter_factory.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/eagle3_device_weights.h"
#include "runner/cuda/eagle3_kernels.h"
#include "runner/draft_kv.h"
#include "runner/drafter.h"

namespace moeserve::cuda {

class CudaEagle3Drafter : public speculative::Drafter {
 public:
  CudaEagle3Drafter(speculative::Eagle3Config config, Eagle3DeviceWeights weights, const CudaDrafterOptions& options);
  ~CudaEagle3Drafter() override;

  // Bytes one block of the KV pool takes: K and V of block_size slots, bf16.
  static size_t kv_block_bytes(const speculative::Eagle3Config& config, int block_size);

  std::vector<int> aux_layers() const override { return config_.aux_layer_ids; }
  void propose(std::span<const speculative::DraftInput> inputs, std::vector<speculative::DraftTree>& out) override {
    propose_scored(inputs, out, nullptr);
  }
  // propose(), also giving each node's cumulative draft log-probability; with scores every draft (chains too)
  // goes through the host tree search, which keeps them.
  void propose_scored(std::span<const speculative::DraftInput> inputs, std::vector<speculative::DraftTree>& out,
                      std::vector<std::vector<float>>* scores);
  void release(uint64_t sequence_id) override;
  int32_t match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) override {
    return kv_tables_.match_prefix(sequence_id, tokens);
  }

  const speculative::Eagle3Config& config() const { return config_; }
  int32_t cached_positions(uint64_t sequence_id) const;
  int64_t num_blocks() const { return kv_tables_.num_blocks(); }
  size_t weight_bytes() const { return weights_.bytes; }

 private:
  using SequenceKv = speculative::DraftSequenceKv;
  // One row of a forward, as the host lays it out (eagle3_kernels.h's DraftRows).
  struct Row {
    int32_t table = 0;  // index into the call's block tables
    int32_t position = 0, slot = 0, prefix = 0;
    std::vector<int32_t> extra;
  };
  struct Drafting;
  static constexpr int kExtendRows = 256;

  // Grows the device buffers for this many rows (a reallocation drops the captured graphs).
  void ensure_capacity(int rows, int extras, int64_t table_entries);
  // Uploads rows, their block tables (nullptr: the spare block) and `gather` (row indices for launch_gather_rows);
  // returns the rows' view for step 0.
  DraftRows upload_rows(const std::vector<Row>& rows, const std::vector<const SequenceKv*>& tables,
                        const std::vector<int32_t>& gather);
  const int32_t* gather_indices() const;
  void upload_tokens(const std::vector<int32_t>& tokens);

  // y = x W^T: the decode GEMV for a few rows, cuBLASLt otherwise.
  void project(const void* x, int rows, const void* weight, int64_t out_features, int64_t in_features, float* y);
  // features_ [rows, feature width] -> g_ [rows, hidden].
  void fuse_features(int rows);
  // The decoder layer over rows with inputs g_ and tokens_: prenorm outputs h2 in residual_, final-normed in normed_.
  void forward_layer(const DraftRows& rows);
  // logits_ of the final-normed rows of x [rows, hidden] (x's norm is recomputed; x is not changed).
  void logits_of(const float* x, int rows);

  // Rolls every sequence back to its start position and runs its newly verified positions (in pieces of at
  // most kExtendRows rows, so activations stay small); the drafting sequences' last prenorm outputs go to roots_,
  // chains first, then trees.
  void extend(std::span<const speculative::DraftInput> inputs, const std::vector<size_t>& chains,
              const std::vector<size_t>& trees);
  void draft_chains(std::span<const speculative::DraftInput> inputs, const std::vector<size_t>& chains,
                    std::vector<speculative::DraftTree>& out);
  // The k draft steps of a chain batch of `rows` (padded) rows, roots' h2 in g_.
  void enqueue_chain(const DraftRows& rows, int k);
  void draft_trees(std::span<const speculative::DraftInput> inputs, const std::vector<size_t>& trees,
                   std::vector<speculative::DraftTree>& out, std::vector<std::vector<float>>* scores);
  // Top-k log-probabilities of logits_'s rows, as full rows (-inf outside the top k) for DraftTreeSearch.
  std::vector<float> top_k_rows(int rows, int k);
  void clear_graphs();
  int32_t to_target(int32_t draft_id) const;

  speculative::Eagle3Config config_;
  Eagle3DeviceWeights weights_;
  CudaDrafterOptions options_;
  cudaStream_t stream_ = nullptr;
  Blas blas_;
  DeviceBuffer inv_freq_;
  speculative::DraftKvTables kv_tables_;
  DeviceBuffer kv_;
  int32_t spare_block_ = 0;  // written by graph padding rows
  DraftKvView kv_view_;

  int64_t roots_first_tree_ = 0;  // roots_ row of the first tree's root (the chains' come first)
  int row_capacity_ = 0, extra_capacity_ = 0;
  int64_t table_capacity_ = 0;
  std::vector<int32_t> meta_host_;
  DeviceBuffer meta_, tokens_, features_, features_bf16_, g_, attn_in_, residual_, qkv_, q_, attn_, proj_, normed_,
      gate_up_, act_, logits_, argmax_, drafted_, top_values_, top_ids_, roots_, store_;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // (bucket, k) -> the chain's draft steps
};

}  // namespace moeserve::cuda
