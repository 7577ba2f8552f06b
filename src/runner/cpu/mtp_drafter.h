// DeepSeek-V3's multi-token prediction (MTP) module as a draft head on the CPU: the layer DeepSeek-V3 and R1 ship as
// model.layers.<num_hidden_layers>, which transformers does not run. For draft position p (deepseek-ai/DeepSeek-V3
// README_WEIGHTS.md; vLLM deepseek_mtp.py and SGLang deepseek_nextn.py, which agree):
//   z = eh_proj(concat(enorm(embed(t_{p+1})), hnorm(g_p)))   the embedding first, the hidden state second
//   y = DecoderLayer_L(z) at position p                       MLA + MoE, with its own latent KV
//   h = shared_head.norm(y);  draft logits = lm_head(h)
// g_p is the target's last hidden state after model.norm (what vLLM and SGLang feed), here the residual stream
// after the target's last layer (aux_layers()) with model.norm applied. A chain's later steps feed back the MTP's
// own h of the step before, after shared_head.norm, as SGLang does and vLLM does since #45895. The calls, rollback
// and chain or tree drafting are TreeDrafter's; the arithmetic is the DeepSeek-V3 CPU runner's, so a sequence gets
// the same draft in any batch.
#pragma once

#include <memory>
#include <vector>

#include "model/deepseek_v3/checkpoint.h"
#include "runner/cpu/mla.h"
#include "runner/cpu/tree_drafter.h"
#include "util/thread_pool.h"

namespace moeserve::speculative {

struct MtpDrafterOptions {
  int block_size = 16;     // token slots per KV block
  int64_t num_blocks = 0;  // blocks in the drafter's own pool (kv_block_bytes() each); must be positive
  size_t threads = 0;      // 0: one per hardware thread
  cpu::MlaForm form = cpu::MlaForm::absorbed;
};

class MtpDrafter : public TreeDrafter {
 public:
  // Fails naming the directory when the checkpoint has no MTP layer.
  MtpDrafter(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint, MtpDrafterOptions options);

  // Bytes one block of the drafter's latent cache takes: block_size latents of the MTP layer (fp32).
  static size_t kv_block_bytes(const deepseek_v3::Config& config, int block_size);

  std::vector<int> aux_layers() const override { return {checkpoint_->config().num_layers - 1}; }

  // Extends as propose() does and returns the draft logits of every newly verified position ([rows, vocab], rows in
  // input order), without drafting: for the tests against a re-computation from transformers' modules.
  std::vector<float> extend_logits(std::span<const DraftInput> inputs);

 private:
  int64_t feature_width() const override { return checkpoint_->config().hidden_size; }
  int64_t state_width() const override { return checkpoint_->config().hidden_size; }
  int32_t target_vocab() const override { return checkpoint_->config().vocab_size; }
  size_t draft_vocab() const override { return static_cast<size_t>(checkpoint_->config().vocab_size); }
  // The target's residual stream -> model.norm of it.
  void fuse_features(const float* features, int64_t n, float* g) override;
  // Rows fed hidden states g: eh_proj of the normed embedding and state, the decoder layer, shared_head.norm.
  void forward_rows(const std::vector<Row>& rows, const float* g, float* h) override;
  void draft_log_probs(const float* h, int64_t R, std::vector<float>& out) override;
  void logits(const float* h, int64_t R, std::vector<float>& out);

  std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint_;
  const deepseek_v3::Mtp& mtp_;
  ThreadPool pool_;
  cpu::MlaAttention attention_;
};

}  // namespace moeserve::speculative
