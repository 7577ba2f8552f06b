// The CUDA runner for the DeepSeek-V3 family (DeepSeek-V3, DeepSeek-R1) on one GPU, behind the same ModelRunner
// interface as its CPU reference (runner/cpu/deepseek_v3_runner.h), whose forward it follows op for op. A step is a
// fixed sequence of kernels over device-resident activations and a paged MLA latent cache (mla_layout.h: one KV
// group, 576 values a token a layer for R1).
//
//   embed -> per layer: [residual add of the last FFN +] RMSNorm
//     -> MLA: q_a, q_a_norm, q_b (or q) | kv_a -> latent cache write (kv_a_norm, k_pe rotated) -> absorb
//        (q~ = W_UK^T q_nope, q_pe rotated) -> absorbed attention over the cache -> un-absorb (W_UV) -> o_proj
//     -> residual add + RMSNorm
//     -> FFN: the dense MLP (layers < first_k_dense_replace), or the MoE: router (gate) -> noaux_tc top-k ->
//        grouping by expert -> routed experts (gate/up with SwiGLU fused, down) -> shared expert -> combine
//   -> residual add + final RMSNorm -> lm_head -> argmax, then the rows' logits processing and draws (logits_rows.h).
//
// Precision::bf16: bf16 activations into every product, the FP8 projections on cuBLASLt with DeepSeek's act_quant
// (fp8_gemm.h; the token count padded to a multiple of 4, which cuBLASLt's scale layout needs), the routed
// experts W8A8 after act_quant on wgmma (deepseek_experts v2, the default: deepseek_experts_wgmma.cu) or W8A16 on
// version 1 (deepseek_experts v1: deepseek_experts.cu), a bf16 or fp8 e4m3 latent cache (--kv-cache-dtype) through
// launch_mla_decode.
// Precision::f32: fp32 activations and latent cache, every FP8 projection W8A32 on deepseek_experts.cu (no
// activation quantisation, as the CPU reference), attention on mla_attention_f32.cu: the CPU runner's logits to
// fp32 rounding.
// Prefill, with CudaRunnerOptions::deepseek_mla_prefill or MOESERVE_DEEPSEEK_MLA_PREFILL "expanded" (the default,
// kExpandedPrefillDefault; "absorbed" keeps every token absorbed): on the bf16 path, a sequence whose step brings
// many query tokens for its context (mla_layout.h's mla_prefill_pays: a whole prompt, a long chunk after a short
// cached prefix) runs its attention in the expanded form (mla_prefill.h: kv_b expansion of its latent rows,
// FlashAttention-2 on tensor cores), launched after the cache write (it reads the step's own latents from the cache)
// and writing its rows of the heads' output; the
// absorbed form takes the step's other tokens, in chunks whose absorbed queries and decode partials fit
// kAttentionScratchBytes. The two are the same function in exact arithmetic (cpu::MlaAttention's two forms). The
// absorbed form keeps: the f32 path (its fp32 cache, which the bf16 tensor-core kernels do not read), graph-shaped
// steps (a graph would hold one step's work lists and grid), sequences past the expansion scratch's bound
// (kPrefillScratchBytes) and the MTP head's chain steps (plan_layer_step with a context: they share one plan and
// its graphs). plan_layer_step's steps of their own (the MTP head's extend over a prompt, deepseek_layer_bench's
// prefill) follow the same rule as forward()'s.
//
// CUDA graphs, as the GPT-OSS runner's (graph_capture.h): decode steps and chain verify steps (every sequence the
// same k + 1 <= 8 tokens and as many logits rows, no tree; MTP's verify steps capture the last layer) are padded to
// their batch-size bucket with sequences that write a spare latent block, and their attention is planned for
// their context bucket (graph_context: launch_mla_decode's grid and scratch depend on the longest context, so a
// graph serves every step whose contexts fit the bucket). Both hold with or without graphs, so the two run the
// same kernels on the same shapes; with graphs the first step of a (bucket, tokens a sequence, context bucket,
// layers captured) is run directly and captured, the later ones replay it with their metadata uploaded into the
// same device buffer. A reallocated buffer drops the graphs (buffers_generation). On by default
// (kDeepseekGraphsDefault, since their tests passed on a GPU); CudaRunnerOptions::deepseek_graphs or
// MOESERVE_DEEPSEEK_GRAPHS "off" turns them off.
// Not yet: tree verification steps (refused), tensor / expert parallelism.
//
// DeepSeek's MTP head on the GPU (deepseek_mtp_cuda_drafter.h) runs its decoder layer through decoder_layer() below,
// on this runner's kernels, activation buffers, cuBLASLt handle and stream, between the target's steps: the engine
// drafts after a step's output is read and before it launches the next, so the two never overlap, and the head's
// work is ordered after the step's on the one stream. Its chain graphs hold this runner's buffers too: it drops
// them when buffers_generation() changes.
#pragma once

#include <memory>
#include <vector>

#include "model/deepseek_v3/config.h"
#include "runner/cuda/blas.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/deepseek_device_weights.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/graph_capture.h"
#include "runner/cuda/kernel_timer.h"
#include "runner/cuda/logits_rows.h"
#include "runner/cuda/mla_prefill.h"
#include "runner/cuda/moe_buffers.h"
#include "runner/cuda/step_metadata.h"

namespace moeserve::cuda {

class DeepseekCudaRunner : public ModelRunner {
 public:
  // options: device, precision, kv_cache_dtype, deepseek_experts, cuda_graphs, deepseek_graphs and
  // deepseek_mla_prefill; the others are GPT-OSS's or not yet taken.
  DeepseekCudaRunner(deepseek_v3::Config config, DeepseekDeviceWeights weights, const CudaRunnerOptions& options);
  ~DeepseekCudaRunner() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return engine_config_; }
  size_t kv_block_bytes(int block_size) const override;
  size_t device_memory_free() const override;
  size_t device_memory_total() const override;
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;

  size_t weight_bytes() const { return weights_.bytes; }
  Precision precision() const { return precision_; }
  KvDtype kv_dtype() const { return kv_dtype_; }
  DeepseekExpertsVersion experts_version() const { return experts_version_; }  // the routed experts' kernel
  bool cuda_graphs() const { return graphs_on_; }
  size_t captured_graphs() const { return graphs_.size(); }  // for tests: graphs held now
  // GPU time by kernel class (kernel_timer.h), for benchmarks: while enabled, forward() runs its steps ungraphed and
  // adds each to the totals; a caller of decoder_layer() ends its own steps (finish_step).
  KernelTimer& kernel_timer() { return timer_; }

  // ---- What the MTP head runs on (see the header comment) ----
  // A step's sizes: tokens, tokens padded for cuBLASLt's FP8 path, logits rows, and the attention's chunking; and
  // the sequences whose attention takes the expanded form.
  struct Plan {
    int tokens = 0, padded_tokens = 0, rows = 0;
    int split_keys = kMlaMaxSplitKeys, max_splits = 1;  // launch_mla_decode's scratch (bf16 path)
    int attention_chunk = 1;                            // tokens a chunk of the absorbed attention
    int context = 0;  // the longest context the bf16 path's attention is sized for (0 on f32: nothing depends on it)
    // The expanded form's sequences in step order (their tokens q_start .. q_start + q_len - 1) and their work on
    // the device; the absorbed form takes every other token. None: every token absorbed.
    std::vector<MlaPrefillSequence> expanded;
    MlaPrefillWork expanded_work;
  };
  const deepseek_v3::Config& model_config() const { return config_; }
  const DeepseekDeviceWeights& weights() const { return weights_; }
  cudaStream_t stream() const { return stream_; }
  // A step of one extra layer over `batch` (causal runs without logits rows) whose block tables index a latent pool
  // laid out as `cache`: its metadata built into `meta`, the runner's buffers sized for it; returns its plan, its
  // attention sized for the batch's longest context or `context`, whichever is longer (a chain's steps share one).
  // With `context` 0, a step of its own: its sequences take the expanded form as forward()'s do (the header
  // comment), their work lists held by the runner until its next plan (forward() or this), so a graph that captures
  // the step serves until then only. With a positive `context`, a chain's graph-shaped steps: all absorbed.
  Plan plan_layer_step(const ForwardBatch& batch, const KvCacheLayout& cache, int context, StepMetadata& meta);
  // Whether prefill may take the expanded form over a latent pool of `block_size` tokens a block: asked for
  // (deepseek_mla_prefill), the bf16 path, and every layer's kv_b and such a pool in shapes its kernels take.
  bool expanded_prefill_possible(int block_size) const;
  // The context a graph-shaped step's attention is planned for (see the header comment): the longest context
  // rounded up to a power of two, at least kMinGraphContext, at most the model's.
  int graph_context(int context) const;
  // Changes whenever a buffer that a step's launches read or write is reallocated: graphs captured before hold
  // stale addresses.
  uint64_t buffers_generation() const { return buffers_generation_; }
  // Decoder layer w over a planned step's tokens, its latents read and written at `layer` of `cache`: x [tokens,
  // hidden] (fp32, the residual stream entering the layer) += attention(input_norm(x)); the FFN's output of
  // post_attention_norm(x) is left in ffn_out() for the caller to add, fused with its next norm.
  void decoder_layer(const DeepseekDeviceLayer& w, const MlaCacheView& cache, int layer, const Plan& plan,
                     const StepView& step, float* x);
  const float* ffn_out() const { return ffn_out_.as<float>(); }
  // y[rows, w.rows] (fp32) = x[rows, w.cols] w^T, x of the precision's type (see the header comment for the paths).
  // On the bf16 path an FP8 weight reads x's rows up to fp8_rows(rows), which must hold finite values.
  void project(const void* x, int rows, const DeviceMatrix& w, float* y);
  static int fp8_rows(int rows);

 private:
  // A step's sizes for its metadata, its attention sized for `context`.
  Plan plan_for(const StepMetadata& meta, int context) const;
  void ensure_capacity(const Plan& plan, size_t capture_layers);
  // meta_ into meta_device_ (grown by doubling: each reallocation drops the graphs).
  void upload_metadata();
  // The sequences of a step (not graph-shaped, the form possible) whose attention takes the expanded form, into
  // plan.expanded, their work lists uploaded and the expansion's scratch grown: forward()'s and plan_layer_step's.
  void plan_expanded_prefill(const ForwardBatch& batch, Plan& plan);
  // A buffer was reallocated: the graphs are dropped and the generation moves on.
  void buffers_moved();
  void enqueue(const Plan& plan, const std::vector<int>& capture_layers);
  // normed_ (the layer's input norm of x) -> x += attention; post_attention_norm(x) -> ffn_out_.
  void attention_and_ffn(const DeepseekDeviceLayer& w, const MlaCacheView& cache, int layer, const Plan& plan,
                         const StepView& step, float* x);
  // normed_ -> proj_: the layer's MLA, its latents written into the cache.
  void attention(const DeepseekDeviceLayer& w, const MlaCacheView& cache, int layer, const Plan& plan,
                 const StepView& step);
  // q_ -> attn_ for tokens [first, end) of the step in the absorbed form, in chunks of plan.attention_chunk.
  void absorbed_attention(const MlaKvbView& kv_b, const MlaCacheView& cache, int layer, const Plan& plan,
                          const StepView& step, int first, int end);
  // normed_ -> ffn_out_: the dense MLP or the MoE.
  void feed_forward(const DeepseekDeviceLayer& w, const Plan& plan);
  // out = down(silu(gate x) * up x) for x = normed_.
  void mlp(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down, const Plan& plan, float* out);
  MlaCacheView cache_view() const;
  Fp8Activations fp8_scratch() const;  // act_quant's output for the FP8 projections and version 2's experts

  deepseek_v3::Config config_;
  ModelConfig engine_config_;
  DeepseekDeviceWeights weights_;
  Precision precision_;
  KvDtype kv_dtype_;
  DeepseekExpertsVersion experts_version_;
  KvGroups groups_;
  int multiprocessors_ = 0;
  cudaStream_t stream_ = nullptr;
  Blas blas_;
  DeviceBuffer inv_freq_;

  KvCacheLayout layout_;
  DeviceBuffer kv_;  // layout_.num_blocks blocks and a spare one, written by graph padding
  int32_t padding_block_ = 0;

  StepMetadata meta_;
  DeviceBuffer meta_device_;
  // Activations of the step in flight (capacity grows). Inputs of FP8 projections hold padded_tokens rows, the
  // rows past a step's tokens zeroed when allocated (they are multiplied, their products dropped).
  DeviceBuffer x_, normed_, q_a_, q_a_normed_, q_, kv_a_, q_latent_, q_rope_, latent_out_, partial_, attn_, proj_,
      mlp_gate_, mlp_up_, mlp_act_, ffn_out_, router_logits_, experts_, expert_weights_, moe_act_, moe_y_, shared_out_,
      fp8_values_, fp8_scales_, logits_in_, logits_, sampled_, captured_;
  MoeBuffers moe_;
  LogitsRows logits_rows_;

  // The expanded-form prefill: asked for (deepseek_mla_prefill), and possible over the runner's cache
  // (expanded_prefill_possible, known once the cache is allocated; plan_layer_step asks it of its pool). Its work
  // lists and scratch are read by direct launches only, never by the runner's or the MTP head's graphs: growing them
  // drops none (a caller's graph of a plan_layer_step step is its own, see there).
  bool expanded_prefill_asked_ = false, expanded_prefill_ = false;
  DeviceBuffer prefill_words_, prefill_scratch_;

  bool graphs_on_ = false;  // options.cuda_graphs and deepseek_graphs
  StepGraphs graphs_;
  KernelTimer timer_;
  uint64_t buffers_generation_ = 0;
};

}  // namespace moeserve::cuda
