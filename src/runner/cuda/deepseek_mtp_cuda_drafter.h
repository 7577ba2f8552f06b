// DeepSeek's MTP head on the GPU: the same Drafter as speculative::MtpDrafter (runner/cpu/mtp_drafter.h, the
// reference the tests compare with), for a DeepSeek-V3 target on the CUDA runner. For draft position p:
//   z = eh_proj(concat(enorm(embed(t_{p+1})), hnorm(g_p)))   the embedding first; g_p = model.norm(the target's
//                                                             residual stream after its last layer at p)
//   z = the MTP decoder layer (MLA + MoE) at position p, over a latent pool of the head's own
//   h = shared_head.norm(z);  draft logits = lm_head(h)
// and a chain's later steps feed back their own h as g. The arithmetic is the target runner's: its kernels, its
// decoder layer (DeepseekCudaRunner::decoder_layer), its projections, activation buffers and stream, in its
// precision (f32: the CPU head's logits to fp32 rounding; bf16: its FP8 path), with a latent pool of one layer in
// its latent type. The head runs between the target's steps (deepseek_cuda_runner.h says why that is safe).
//
// The target's hidden state reaches the head through the host: the runner copies its captured last layer back
// (ForwardOutput::captured), the engine hands it over as DraftInput::features, the head uploads it (hidden x 4
// bytes a verified token each way). Keeping it on the device needs a device path through the Drafter interface.
//
// A call: one layer step over every sequence's newly verified positions (the extend; variable rows, not graphed),
// then for chains k - 1 further layer steps of one row per sequence, each fed the token the step before chose
// (argmax on the device, copied into the step's token ids there) and its own h; the drafted tokens (and, when
// scores are asked for, every depth's logits) come back in one copy at the end. The chains' rows are padded to the
// graph bucket (graph_capture.h) with rows of one token at position 0 of a spare latent block, every depth's
// metadata is uploaded before the first, and the whole chain is planned for one context bucket
// (DeepseekCudaRunner::graph_context), with graphs or without: so the chain is one CUDA graph per (bucket, k,
// context bucket), with or without kept logits, captured at its first call when the target's steps are graphed
// (CudaDrafterOptions::cuda_graphs and the target's cuda_graphs()), replayed after. A graph holds the head's
// buffers and the target's: it is dropped when either is reallocated (DeepseekCudaRunner::buffers_generation).
// Chains only (tree shapes are refused).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/cuda/cuda_drafter_factory.h"
#include "runner/cuda/deepseek_cuda_runner.h"
#include "runner/cuda/deepseek_device_weights.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/graph_capture.h"
#include "runner/cuda/step_metadata.h"
#include "runner/draft_kv.h"
#include "runner/drafter.h"

namespace moeserve::cuda {

class DeepseekMtpCudaDrafter : public speculative::Drafter {
 public:
  // target must outlive the drafter's calls; weights: its checkpoint's MTP module (DeepseekDeviceMtp::upload).
  DeepseekMtpCudaDrafter(DeepseekCudaRunner& target, DeepseekDeviceMtp weights, const CudaDrafterOptions& options);

  // Bytes one block of the head's latent pool takes: block_size latents of its one layer in `dtype`.
  static size_t kv_block_bytes(const deepseek_v3::Config& config, KvDtype dtype, int block_size);

  std::vector<int> aux_layers() const override { return {target_.model_config().num_layers - 1}; }
  void propose(std::span<const speculative::DraftInput> inputs, std::vector<speculative::DraftTree>& out) override {
    propose_scored(inputs, out, nullptr);
  }
  // propose(), also giving each node's cumulative draft log-probability (parallel to out[i].tokens), as
  // MtpDrafter::propose_scored does: the logits of every depth come back to the host for them.
  void propose_scored(std::span<const speculative::DraftInput> inputs, std::vector<speculative::DraftTree>& out,
                      std::vector<std::vector<float>>* scores);
  // Extends as propose() does and returns the draft logits of every newly verified position ([rows, vocab], rows in
  // input order), without drafting (MtpDrafter::extend_logits).
  std::vector<float> extend_logits(std::span<const speculative::DraftInput> inputs);
  void release(uint64_t sequence_id) override { kv_tables_.release(sequence_id); }
  int32_t match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) override {
    return kv_tables_.match_prefix(sequence_id, tokens);
  }

  int32_t cached_positions(uint64_t sequence_id) const { return kv_tables_.cached_positions(sequence_id); }
  size_t weight_bytes() const { return weights_.bytes; }
  size_t captured_graphs() const { return graphs_.size() + scored_graphs_.size(); }  // for tests: graphs held now

 private:
  using SequenceKv = speculative::DraftSequenceKv;
  // A layer step planned on the target, its metadata on the device.
  struct Step {
    DeepseekCudaRunner::Plan plan;
    StepView view;
  };

  Step upload_step(const ForwardBatch& batch);
  // Grows the head's row buffers for a step of `rows` rows (a reallocation drops the graphs).
  void ensure_rows(int rows);
  // logits_ grown for `rows` rows (a reallocation drops the graphs).
  float* logits_rows(size_t rows);
  // The pool as the steps' metadata sees it: the tables' blocks and the spare one graph padding rows write.
  KvCacheLayout pool_layout() const { return {cache_layout_.block_size, cache_layout_.num_blocks + 1}; }
  MlaCacheView cache_view() const;
  // shared_head.norm of the states z [rows, hidden] (fp32) into out, of type `type`.
  void head_norm(const float* z, int rows, Precision type, void* out);
  // The step's rows, fed its tokens and the states g [rows, hidden] (fp32): z_ = the MTP layer's output, normed_
  // its h in the precision's type.
  void forward_rows(const Step& step, const float* g);
  // logits [rows, vocab] of normed_'s rows.
  void lm_head(int rows, float* logits);
  // logits_ [rows, vocab] of the states z (fp32, before shared_head.norm).
  void logits_of(const float* z, int rows);
  // Rolls every sequence back to its start position and runs its newly verified positions in one layer step;
  // returns the step's rows, and per input the z_ row of its last position (-1 for none) in last_row.
  int extend(std::span<const speculative::DraftInput> inputs, std::vector<int64_t>& last_row);
  // The chains of inputs[chains[i]], from z_'s rows `roots[i]` (extend's), k = the longest; logits of every
  // depth back to the host when scores are asked for.
  void draft_chains(std::span<const speculative::DraftInput> inputs, const std::vector<size_t>& chains,
                    const std::vector<int64_t>& roots, std::vector<speculative::DraftTree>& out,
                    std::vector<std::vector<float>>* scores);
  // Depth d's (1 .. k - 1) layer steps of `rows` chain rows (of which `chains` real) at positions L + d - 1, their
  // metadata uploaded into chain_meta_; returns their plan and views (views[d - 1]).
  DeepseekCudaRunner::Plan plan_chain(const std::vector<SequenceKv*>& kvs, int rows, int k,
                                      std::vector<StepView>& views);
  // The k draft steps of `rows` rows from roots_: argmax tokens into drafted_ [depth][rows], logits into logits_
  // (every depth's, [depth][rows][vocab], when keep_logits; else each depth over the last).
  void enqueue_chain(const DeepseekCudaRunner::Plan& plan, const std::vector<StepView>& views, int rows, int k,
                     bool keep_logits);
  void clear_graphs();

  DeepseekCudaRunner& target_;
  DeepseekDeviceMtp weights_;
  bool graphs_on_;              // options.cuda_graphs and the target's
  size_t block_bytes_;          // kv_block_bytes of the target's config and latent type
  KvCacheLayout cache_layout_;  // the head's pool: block_size, num_blocks (the tables')
  speculative::DraftKvTables kv_tables_;
  DeviceBuffer kv_;  // [block][1 layer][block_size][kv_lora_rank + rope] (mla_layout.h), num_blocks + 1 blocks
  StepMetadata meta_;
  DeviceBuffer meta_device_;  // the extend's
  // The chain's depths: their metadata, each at a fixed slot of chain_meta_ (slot_ints_ apart, grown by doubling).
  std::vector<StepMetadata> depth_meta_;
  DeviceBuffer chain_meta_;
  size_t slot_ints_ = 0;
  std::vector<int32_t> spare_table_;  // a padding row's block table: the spare block
  int row_capacity_ = 0;
  // Per row: the target's features, the fed states g, the embedding, enorm and hnorm outputs, both side by side
  // (eh_proj's input: fp8_rows rows, zeroed when allocated, as the runner's FP8 inputs), z, h for the lm_head.
  DeviceBuffer features_, g_, embedded_, enormed_, hnormed_, both_, z_, normed_;
  DeviceBuffer roots_, logits_, drafted_;  // chains: the roots' z, logits [rows, vocab], tokens [depth][row]
  StepGraphs graphs_, scored_graphs_;      // the chains without and with every depth's logits kept
  uint64_t target_generation_ = 0;         // the target's buffers_generation() the graphs were captured at
};

}  // namespace moeserve::cuda
