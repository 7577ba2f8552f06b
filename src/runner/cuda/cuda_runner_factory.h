// Making a CUDA runner, from code that may be built without CUDA: without it, the factories fail with
// "built without CUDA" and cuda_runner_available() is false.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/gpt_oss/checkpoint.h"
#include "runner/runner.h"

namespace moeserve {

namespace deepseek_v3 {
class Checkpoint;
}

struct CudaRunnerOptions {
  int device = 0;
  // "bf16" (the fast path: bf16 activations, KV cache and dense weights) or "f32" (the plain kernels, fp32
  // throughout; matches the CPU runner to rounding).
  std::string precision = "bf16";
  // vLLM's --kv-cache-dtype: "auto" (the precision's type), "bf16" (or "bfloat16"), "fp8_e4m3" (or "fp8": half the
  // bytes a block, so twice the sequences in the pool; per-layer K and V scales from the checkpoint, else 1.0).
  std::string kv_cache_dtype = "auto";
  // --activation-dtype: "auto" / "bf16" (the default: bf16 activations everywhere) or "fp8" (the decode-regime
  // expert projections, the decode_mma paths, take their inputs as e4m3 with a dynamic scale per row and run e4m3
  // tensor cores; AMD's MLPerf recipe of MXFP4 weights with FP8 activations; other paths stay bf16). Needs bf16.
  std::string activation_dtype = "auto";
  bool cuda_graphs = true;  // capture decode and chain verify steps per (batch-size bucket, tokens a sequence)
  // Decode steps of at most 4 tokens (bf16) may run the QKV projection with RoPE and the KV write in one kernel
  // (kernels.h's launch_qkv_rope_kv_write), the output projection with the residual add + RMSNorm after it in another
  // (launch_dense_gemv_add_rms_norm; on one GPU), and the router's projection with its top-k and the grouping in a
  // third (launch_router_route_and_group), each the same bits as the launches it replaces. Off by default until
  // their tests have run on a GPU (cuda_bench --fused-small-steps turns all three on).
  bool fused_qkv_rope = false;
  bool fused_o_norm = false;
  bool fused_router = false;
  // Synthetic weights only: expert popularity, "uniform" (random router weights route near uniformly) or
  // "zipf:S" (DeviceWeights::synthetic's router_skew S; real gpt-oss routing is skewed, some experts hot).
  std::string synthetic_router = "uniform";
  // The MoE kernels by mean rows per expert, "PATH:MAX,...,PATH" (moe_plan.h's parse_moe_path_table); empty: the
  // built-in choice measured on an H200. For benchmarking kernels end to end.
  std::string moe_path_table;
  // prefill_wgmma_hot's rows that make an expert hot (MoeGemmParams::Hot::min_rows); 0: its default, 1,024. For
  // benchmarking (cuda_bench --moe-hot-min).
  int moe_hot_min_rows = 0;
  // With --activation-dtype fp8: steps of at least this many tokens run the QKV and output projections on FP8 too
  // (their bf16 weights quantised at load into 128 x 128 blocks of one scale each, the activations per token per 128
  // columns, cuBLASLt's block-scaled e4m3 product; fp8_gemm.h's fp8_dense_linear); smaller steps (decode) stay bf16.
  // 0: never. cuda_bench --dense-fp8-min varies it.
  int dense_fp8_min_rows = 1024;
  // On prefill-sized steps (the grouped GEMM's paths) the experts' second projection writes bf16 rows instead of
  // fp32 (half the bytes written and read back by the combine), as vLLM's and TensorRT-LLM's MoE kernels do; decode
  // steps keep fp32 rows (measured no faster with bf16 ones on an H100). cuda_bench --expert-out-fp32 turns it off.
  bool expert_out_bf16 = true;
  // Where the QKV projection runs on FP8 (dense_fp8_min_rows): the RMSNorm before it writes its rows quantised
  // (launch_add_rms_norm_e4m3; no launch of its own for the quantisation, no bf16 rows written and read back) and the
  // product writes bf16 rows for RoPE (half the bytes of fp32 ones; fp32 where cuBLASLt refuses bf16). cuda_bench
  // --qkv-fp8-unfused turns both off.
  bool qkv_fp8_fused = true;
  // Sliding-window layers' prefill attention runs one block a multiprocessor, each taking the launch's units in
  // turn (launch_attention_prefill's built-in choice); false: one block a unit, as before. cuda_bench
  // --attention-block-a-unit sets false.
  bool attention_units_in_turn = true;
  // Where the output projection runs on FP8 and every token of the step is in prefill attention tiles: the attention
  // kernel writes its output quantised for it (AttentionParams::out_e4m3) instead of bf16 rows that a launch of its
  // own quantises (H100, 2f883af: prefill 1 x 8k 39,061 / 39,014 -> 39,568 / 39,271 tokens/s). cuda_bench
  // --o-fp8-unfused turns it off.
  bool o_fp8_fused = true;
  // The DeepSeek runner's routed experts (deepseek_kernels.h's DeepseekExpertsVersion): "v2" (the FP8 grouped GEMM
  // on wgmma, after act_quant; it takes the bf16 path's FP8 experts, the rest stays on v1 under either; the default)
  // or "v1" (CUDA cores); empty: MOESERVE_DEEPSEEK_EXPERTS decides (unset: v2). For tests and benchmarks.
  std::string deepseek_experts;
  // The DeepSeek runner's CUDA graphs (its decode and chain verify steps, and its MTP head's chains): "on" or "off";
  // empty: MOESERVE_DEEPSEEK_GRAPHS decides (unset: on, since their tests passed on an H200). cuda_graphs false turns
  // them off either way.
  std::string deepseek_graphs;
  // The DeepSeek runner's prefill attention: "expanded" (the sequences of a step that bring many query tokens for
  // their context run mla_prefill.cu's expanded form, the others the absorbed form) or "absorbed" (every token
  // absorbed, as decode); empty: MOESERVE_DEEPSEEK_MLA_PREFILL decides (unset: expanded, 2.6-3.7x faster an MoE
  // layer's prefill on an H100; docs/PERF.md). The f32 path and graph-shaped steps take the absorbed form either way
  // (deepseek_cuda_runner.h says why).
  std::string deepseek_mla_prefill;
  // vLLM's --tensor-parallel-size: the model split over GPUs 0 .. N-1 of this host, through NCCL
  // (tensor_parallel_cuda_runner.h).
  int tensor_parallel_size = 1;
  bool expert_parallel = false;  // --enable-expert-parallel: each GPU holds whole experts, its share of them
  // Set by the expert-parallel split for one rank (tensor_parallel_cuda_runner.cc): the model's experts
  // [first_expert, first_expert + local_experts) are the ones its weights hold; 0: all of them.
  int first_expert = 0, local_experts = 0;
};

// The router skew a --synthetic-router value names (0 for "uniform"); fails on anything else.
double parse_synthetic_router(const std::string& value);

bool cuda_runner_available();  // built with CUDA and a device is present

std::unique_ptr<ModelRunner> make_cuda_runner(std::shared_ptr<const Checkpoint> checkpoint,
                                              const CudaRunnerOptions& options = {});

// Random weights of a real shape ("gpt-oss-20b" or "gpt-oss-120b"), made on the GPU.
std::unique_ptr<ModelRunner> make_synthetic_cuda_runner(const std::string& shape, uint64_t seed,
                                                        const CudaRunnerOptions& options = {});

// The DeepSeek-V3 family (DeepSeek-V3, DeepSeek-R1) on one GPU (runner/cuda/deepseek_cuda_runner.h).
std::unique_ptr<ModelRunner> make_deepseek_cuda_runner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint,
                                                       const CudaRunnerOptions& options = {});
// Random FP8 weights of a DeepSeek-V3 family shape ("deepseek-r1") at `layers` layers, made on the GPU.
std::unique_ptr<ModelRunner> make_synthetic_deepseek_cuda_runner(const std::string& shape, int layers, uint64_t seed,
                                                                 const CudaRunnerOptions& options = {});

}  // namespace moeserve
