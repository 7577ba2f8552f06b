// The CUDA runner: GPT-OSS's forward on one GPU, behind the same ModelRunner interface as the CPU reference.
// A step is a fixed sequence of kernels (kernels.h) over device-resident activations and a paged KV cache;
// decode steps (one token per sequence) are captured as CUDA graphs per batch-size bucket (1, 2, 4, ... 1,024,
// padded with dummy sequences that write a spare KV block) and replayed with new metadata. Tree verification
// steps (SequenceStep::tree_parent, at most 64 tokens a tree) run un-graphed with per-token ancestor masks.
//
// Per layer: [residual add +] RMSNorm -> QKV (cuBLASLt) -> RoPE + KV write -> attention (two launches over
// disjoint tokens: prefill chunks through flash tiles on tensor cores, the other sequences' tokens through
// split-key decode attention on tensor cores) -> output projection (cuBLASLt) -> residual add + RMSNorm ->
// router (cuBLASLt) -> top-k -> grouping by expert -> MXFP4 expert GEMMs (SwiGLU fused into the first) -> the
// weighted combine, fused into the next layer's residual add + RMSNorm. The KV cache is the precision's type, or
// fp8 e4m3 with per-layer K and V scales (--kv-cache-dtype; kv_scales.h reads a checkpoint's).
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "runner/cuda/blas.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/device_weights.h"
#include "runner/cuda/fp8_gemm.h"
#include "runner/cuda/graph_capture.h"
#include "runner/cuda/kernel_timer.h"
#include "runner/cuda/kv_scales.h"
#include "runner/cuda/logits_rows.h"
#include "runner/cuda/moe_buffers.h"
#include "runner/cuda/step_metadata.h"
#include "runner/parallel/communicator.h"

namespace moeserve::cuda {

class CudaRunner : public ModelRunner {
 public:
  CudaRunner(ModelConfig config, DeviceWeights weights, Precision precision, const CudaRunnerOptions& options,
             KvScales scales = {});
  ~CudaRunner() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return config_; }
  size_t kv_block_bytes(int block_size) const override;
  size_t device_memory_free() const override;
  size_t device_memory_total() const override;
  void allocate_kv_cache(const KvCacheLayout& layout) override;
  const KvCacheLayout& kv_cache_layout() const override { return layout_; }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override;
  // The split forward (runner.h): launch enqueues the whole step, the sampled tokens' copy into pinned memory
  // included, records an event and returns; collect waits for the event and fills the output. A step that copies
  // logits, captured layers or logprobs back copies them into pageable memory, which waits for the step in launch.
  void launch(const ForwardBatch& batch) override;
  void collect(ForwardOutput& output) override;
  // Enqueued on the runner's stream (so before the next step), without waiting for it.
  void move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves) override;

  // For benchmarks: random KV contents, so that decode at a long context is timed without a prefill first.
  void fill_kv_cache_random(uint64_t seed);
  size_t weight_bytes() const { return weights_.bytes; }
  Precision precision() const { return precision_; }
  KvDtype kv_dtype() const { return kv_dtype_; }
  // The MoE kernel a step of `tokens` tokens uses, for reports.
  std::string moe_path_name(int tokens) const;
  // GPU time by kernel class (benchmarks): while enabled, steps run without CUDA graphs.
  KernelTimer& kernel_timer() { return timer_; }
  // Rows each expert got in the last layer of the last step (synchronises; benchmarks report the routing's skew).
  std::vector<int32_t> last_layer_expert_rows();

  // Makes this runner one rank of a tensor-parallel group (tensor_parallel_cuda_runner.h): its config and weights
  // are the rank's slice, and every step sums the attention output and the experts' outputs (each rank's combined
  // per token first: its grouped rows are in an order of its own) with the other ranks through `communicator`, on
  // stream(), before their residual adds. The collectives are captured with the rest.
  // `vocab`: the unembedding rows its weights hold (split_range(vocab, size, rank); all of them: the whole
  // unembedding). With a slice, every step ends in the distributed argmax (vocab_best.h: each rank's best of its
  // slice all-gathered, then merged, in the step and so in its graph), and a step whose rows need whole logits
  // (returned, logprobs, edits or masks, rows that sample) gathers the slices into whole rows after it, outside the
  // graph, before the logits processing and sampling run on them as alone.
  void join_group(Communicator* communicator, IndexRange vocab);
  // Fails as forward() would on a malformed step, without running it.
  void check_batch(const ForwardBatch& batch) const;
  cudaStream_t stream() const { return stream_; }

 private:
  struct Plan {
    int tokens = 0;
    bool prefill_attention = false;
    int splits = 1;  // decode attention's (most) key splits
    MoePath moe = MoePath::reference;
  };
  Plan plan_for(const StepMetadata& meta) const;
  void ensure_capacity(const StepMetadata& meta, const Plan& plan, size_t capture_layers);
  void upload(const StepMetadata& meta);
  // Enqueues every kernel of a step; copies the residual stream after `capture_layers` into captured_ (on the
  // device, so that a graph can hold the copies): [capture_layers.size()][tokens, hidden].
  void enqueue(const StepMetadata& meta, const Plan& plan, const std::vector<int>& capture_layers);
  // y = x W^T + bias: the decode GEMV for a few bf16 rows, cuBLASLt otherwise.
  void project(const void* x, int rows, const void* weight, int64_t out_features, int64_t in_features,
               const float* bias, float* y);
  // With options_.qkv_fp8_fused, a step of `rows` tokens whose QKV projection runs on FP8: the product's output type
  // (bf16, or fp32 where cuBLASLt refuses bf16), its input quantised by the norm before it; nullopt otherwise.
  std::optional<Precision> fused_qkv_fp8_output(int layer, int rows);
  // The same product on FP8 (fp8_dense_linear), returning true, when this runner has a quantised copy of the weight
  // (dense_fp8_) and the step has at least options_.dense_fp8_min_rows tokens: y then lacks the bias, which the
  // caller adds as it reads y. project() with the bias otherwise, and where cuBLASLt refuses (false).
  bool project_dense(const void* x, int rows, const void* weight, const Fp8QuantisedWeight* fp8, int64_t out_features,
                     int64_t in_features, const float* bias, float* y);
  // Whether the unembedding is a slice of the vocabulary (vocab_ below).
  bool vocab_split() const { return vocab_.size() < config_.vocab_size; }
  // Vocab split: the R rows' whole logits into logits_, all-gathered from every rank's logits_local_.
  void gather_whole_logits(int64_t R);
  // The step launch() enqueued, until collect(): what collect needs to fill the output.
  struct LaunchedStep {
    std::chrono::steady_clock::time_point started;
    LogitsRows::Work logits_rows;  // the real rows' processing; their tokens, logits and logprobs after it
    std::vector<std::vector<float>> captured;
  };
  std::optional<LaunchedStep> launched_step_;
  // One set of pinned host buffers (the metadata's staging_, logits_rows_'): a launch comes only after the previous
  // step's collect, which waited for every copy of that step, so no host buffer is rewritten under a step still
  // reading or writing it.
  cudaEvent_t step_done_ = nullptr;  // recorded after the launched step's last copy

  ModelConfig config_;
  DeviceWeights weights_;
  Precision precision_;
  CudaRunnerOptions options_;
  KvDtype kv_dtype_;
  bool fp8_activations_ = false;  // --activation-dtype fp8
  MoePathTable moe_paths_;  // --moe-path-table; empty: choose_moe_path's built-in choice
  KvScales kv_scales_;  // one K and one V scale per layer (1.0 unless the checkpoint has them)
  KvGroups groups_;
  int max_layers_per_group_ = 0;
  int multiprocessors_ = 0;
  int local_experts_ = 0;  // the experts this runner's weights hold, from options_.first_expert (all unless expert parallel)
  cudaStream_t stream_ = nullptr;
  Blas blas_;
  DeviceBuffer inv_freq_;

  KvCacheLayout layout_;
  DeviceBuffer kv_;
  int32_t padding_block_ = 0;  // the pool's spare block, written by graph padding
  DeviceBuffer move_args_;     // move_kv_slots' moves and block tables

  StepMetadata meta_;
  DeviceBuffer meta_device_;
  int32_t* staging_ = nullptr;  // pinned host copy of the metadata
  size_t staging_bytes_ = 0;

  // Activations of the step in flight (capacity grows; a reallocation drops the captured graphs).
  DeviceBuffer x_, normed_, qkv_, q_, attn_, proj_, router_logits_, experts_, expert_weights_, moe_act_, moe_y_,
      partial_, logits_in_, logits_, sampled_, captured_;
  // Vocab split: this rank's [R, slice] logits, its bests per row, every rank's bests [ranks][R], and the padded
  // pieces gather_whole_logits exchanges ([R, longest slice] a rank).
  DeviceBuffer logits_local_, vocab_best_, vocab_bests_, vocab_piece_, vocab_pieces_;
  // FP8 activations: the expert projections' inputs as e4m3 with a scale per row (mlp1: [T, H]; mlp2: [T * k, I]).
  DeviceBuffer moe_x_fp8_, moe_x_scale_, moe_act_fp8_, moe_act_scale_;
  DeviceBuffer moe_hot_;  // prefill_wgmma_hot's dequantised hot experts (moe_hot_bytes), grown by steps on that path
  // options_.dense_fp8_min_rows > 0 with FP8 activations: each layer's QKV and output projection weights quantised
  // at load (fp8_gemm.h), and their inputs' e4m3 values and scales for steps that take them (padded rows).
  struct DenseFp8 {
    std::optional<Fp8QuantisedWeight> qkv, o;
  };
  std::vector<DenseFp8> dense_fp8_;
  DeviceBuffer dense_x_fp8_, dense_x_scale_;
  IndexRange vocab_;  // the unembedding rows the weights hold (all of them unless join_group gave a slice)
  DeviceBuffer moe_out_;  // in a group: the experts' outputs combined per token [T, H], summed over the ranks
  DeviceBuffer decode_counters_;  // decode attention's split counters: zeroed when allocated, zero between launches
  // The fused kernels' block counters (zeroed when allocated, zero between launches): [0] the router's
  // (launch_router_route_and_group), [1] the output projection's (launch_dense_gemv_add_rms_norm).
  DeviceBuffer fused_counters_;
  MoeBuffers moe_;
  LogitsRows logits_rows_;  // the rows' logits processing, draws and logprobs, after the step's argmax

  KernelTimer timer_;
  // A replayable step per uniform batch shape: decode steps and chain verify steps (every sequence the same number
  // of tokens, a logits row each, no tree), by batch-size bucket, tokens a sequence and the layers captured.
  StepGraphs graphs_;
  Communicator* communicator_ = nullptr;   // the rank's group, or null alone
};

}  // namespace moeserve::cuda
