// The DeepSeek-V3 CUDA runner's own kernels (deepseek_cuda_runner.h), beside the family's ops already declared in
// kernels.h (MLA cache write, decode, absorption; the noaux_tc router) and fp8_gemm.h (FP8 block-scaled dense
// projections on cuBLASLt): the routed experts over FP8 block-scaled weights, the MoE combine with the shared
// expert, SwiGLU of two projections, MLA attention over an fp32 latent cache, and the e4m3 fill of synthetic
// weights. Each launcher lives in its own .cu file and enqueues on `stream` without synchronising; each is tested
// against its CPU counterpart (tests/runner/cuda/deepseek_runner_test.cc; the routed experts' version 2 in
// deepseek_experts_wgmma_test.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/fp8_gemm.h"
#include "runner/cuda/host_device.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

// A weight as DeepSeek's device weights hold it: `count` matrices of [rows, cols] stacked (the routed experts of a
// layer; 1 for a projection). fp8_block: e4m3 bytes with one fp32 scale per 128 x 128 block in fp8_gemm.h's
// layout (block (r / 128, c / 128) of matrix e at scales + e * fp8_weight_scale_count(rows, cols) +
// (r / 128) * fp8_weight_scale_ld(cols) + c / 128); bf16 and f32: plain values, no scales.
enum class WeightType { fp8_block, bf16, f32 };
struct DeviceMatrix {
  WeightType type = WeightType::bf16;
  const void* values = nullptr;
  const float* scales = nullptr;  // fp8_block only
  int64_t rows = 0, cols = 0;
  int count = 1;

  MOESERVE_HD int64_t values_per_matrix() const { return rows * cols; }
  MOESERVE_HD int64_t scales_per_matrix() const {
    return type == WeightType::fp8_block ? fp8_weight_scale_count(rows, cols) : 0;
  }
  // Matrix 0 as fp8_gemm.h's view (type fp8_block).
  Fp8WeightView fp8_view() const { return {static_cast<const uint8_t*>(values), scales, rows, cols}; }
};
inline WeightType weight_type_of(Precision p) { return p == Precision::bf16 ? WeightType::bf16 : WeightType::f32; }

// ---- deepseek_experts.cu: expert projections over rows grouped by expert ------------------------------------------
// Tiles of this many grouped rows (launch_group_by_expert's rows_per_tile for these kernels).
inline constexpr int kDeepseekExpertTileRows = 16;
struct DeepseekExpertParams {
  DeviceMatrix w;      // [E][N, K]: the gate projection when up is set, else the projection
  DeviceMatrix up;     // set (values non-null): out = silu(w x) * (up x), SwiGLU fused; same shape and type as w
  const void* x = nullptr;         // input rows [*, K] of x_type
  Precision x_type = Precision::f32;
  const int32_t* x_row = nullptr;  // x row of each grouped row (the grouping's row_token); null: row itself
  void* out = nullptr;             // [rows, N]: of out_type with SwiGLU, fp32 without
  Precision out_type = Precision::f32;
  int rows = 0;
  // The grouping (launch_group_by_expert with kDeepseekExpertTileRows); tile_expert null: one matrix (w.count 1)
  // over rows 0 .. rows - 1 in order, which is a dense projection (the f32 path's FP8 projections).
  MoeRouting routing;
  // Version 2 only (routed experts on the FP8 path): x has x_rows rows (the tokens, which x_row indexes; rows
  // without x_row), quantised by the launcher into x_fp8 (fp8_activation_scale_count(x_rows, K) scales).
  Fp8Activations x_fp8;
  int x_rows = 0;
};
// Version 1, correctness first, on CUDA cores: a block takes one tile of up to 16 rows of one expert and 128
// outputs (one row of 128 x 128 weight blocks), each thread one output (gate and up with SwiGLU) for all the
// tile's rows; per 128-column block of K the products of the weight values (e4m3 widened exactly) with the fp32
// inputs are summed in fp32, then times the block's scale added into an fp32 accumulator (DeepSeek's per-block
// promotion). K must be a multiple of 16. CPU reference: cpu::linear over the expert's deepseek_v3::Linear (then
// cpu::silu_mul).
//
// Version 2 (deepseek_experts_wgmma.cu), the tensor-core grouped GEMM of issue 17: x quantised per token per 128
// columns (act_quant, launch_fp8_quantize_activations, into params.x_fp8), then tiles of up to 128 rows of one
// expert x 128 weight rows (64 gate and 64 up rows with SwiGLU) on wgmma m64n128k32 e4m3, each 128-column block of K
// into a block accumulator that the CUDA cores scale by the row's activation scale and the weight block's scale and
// add into an fp32 accumulator (DeepSeek's promotion: Hopper's FP8 tensor cores do not accumulate in full fp32).
// It serves the routed experts of the FP8 path (x bf16, fp8_block weights, a grouping; any grouping tile, it reads
// only expert_offsets); the f32 path's W8A32 products and the dense projections run version 1 under either choice.
// CPU reference: the same, on the activations act_quant rounded (quantize_activations_fp8).
enum class DeepseekExpertsVersion { v1, v2 };
// Version 2 is the default: its tests (deepseek_experts_wgmma_test.cc and the runner's bf16_experts_v2 cases in
// deepseek_runner_test.cc) pass on an H200 and an H100, compute-sanitizer finds 0 hazards (racecheck, after 0f1eb3d)
// and 0 errors (memcheck) on it, and an MoE layer runs 2.1-4.3x faster than on version 1 (docs/PERF.md, issue 17).
// Version 1 stays selectable ("v1") and serves what version 2 does not take (above).
inline constexpr DeepseekExpertsVersion kDeepseekExpertsDefault = DeepseekExpertsVersion::v2;
// "v1" is version 1, "v2" version 2, empty the default (kDeepseekExpertsDefault); any other name fails, naming
// `source` (the variable or option).
DeepseekExpertsVersion parse_deepseek_experts_version(std::string_view name, std::string_view source);
// MOESERVE_DEEPSEEK_EXPERTS, for users and benchmarks (the DeepSeek CUDA runner reads it when its
// CudaRunnerOptions::deepseek_experts is empty): read at the first call; a bad value fails there and at every call.
DeepseekExpertsVersion deepseek_experts_version();
void launch_deepseek_experts(cudaStream_t stream, const DeepseekExpertParams& params, DeepseekExpertsVersion version);
// Version 2 alone (launch_deepseek_experts' dispatch calls it): fails naming what is missing unless the weights are
// fp8_block, the rows grouped, x bf16 (and SwiGLU's output) and x_fp8 / x_rows set.
void launch_deepseek_experts_wgmma(cudaStream_t stream, const DeepseekExpertParams& params);

// ---- deepseek_moe_combine.cu: the MoE layer's output ---------------------------------------------------------------
// out[t] = sum_j weights[t, j] y[slot_row[t, j]] (the slots in order, from zero) + shared[t] (when non-null): the
// routed experts' weighted sum, then the shared expert added, as cpu::feed_forward sums them.
void launch_deepseek_moe_combine(cudaStream_t stream, const ExpertCombine& combine, const float* shared, int T, int H,
                                 float* out);

// ---- deepseek_swiglu.cu: the dense MLP's activation ------------------------------------------------------------------
// out[i] = gate[i] / (1 + exp(-gate[i])) * up[i] for n values, written as out_type (cpu::silu_mul).
void launch_silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, Precision out_type, void* out);

// ---- mla_attention_f32.cu: absorbed MLA over an fp32 latent cache ---------------------------------------------------
// The fp32 path's attention (Precision::f32; launch_mla_decode reads bf16 and fp8 caches only): one block per
// (token, head) walks the token's visible positions in chunks with an online softmax, all fp32. Same parameters
// and result as launch_mla_decode (params.cache.dtype f32; no scratch); tree steps refused.
// CPU reference: cpu::MlaAttention's absorbed form (attend_absorbed), between its two projections.
void launch_mla_attention_f32(cudaStream_t stream, const MlaDecodeParams& params, const StepView& step);

// ---- deepseek_synthetic.cu: random FP8 weights ----------------------------------------------------------------------
// n random e4m3 bytes, a pure function of (key, index): launch_fill_bytes' bytes with the exponent's top bit cleared,
// so every value is finite, |v| <= 1.875 (rms 0.598 over the 128 codes), never NaN.
inline constexpr float kSyntheticE4m3Rms = 0.598f;
void launch_fill_e4m3(cudaStream_t stream, uint8_t* out, int64_t n, uint64_t key);

}  // namespace moeserve::cuda
