// Host-side facts of the FP8 block-scaled GEMM (fp8_gemm.h): the shapes it accepts, the layout cuBLASLt reads the
// two scale arrays in, the weight scales rearranged into it at upload, and DeepSeek's activation quantiser as a
// CPU model (the one the device kernel must match byte for byte). Plain C++ with no CUDA, so that the CPU tests
// cover it.
//
// cuBLASLt's DeepSeek-style block scaling (cuBLAS 12.9+, sm_90 only: NVIDIA/CUDALibrarySamples issues #270 and
// #310), as PyTorch's _scaled_mm feeds it (pytorch/pytorch PRs #158037 and #166752, the latter quoting the cuBLAS
// docs' "scaling factors layouts" section; its tests' 1x128 x 128x128 recipe is DeepSeek's x W^T):
//   - FP8 on Hopper is TN only: with column-major operands, A = W viewed as K x N (TRANSA = T, lda = K) and
//     B = x viewed as K x T (TRANSB = N, ldb = K); D is N x T (y row-major [T, N]). This is Blas::linear's view.
//   - A (the weight) takes CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: a ceil(K/128) x ceil(N/128) fp32 matrix,
//     column-major, whose leading dimension is ceil(K/128) rounded up to a multiple of 4 ("L4"; PR #166752:
//     without that padding cuBLASLt gave silently wrong answers when (K/128) % 4 != 0). Scale (kb, nb) sits at
//     nb * L4 + kb: the checkpoint's row-major [ceil(N/128), ceil(K/128)] array with its rows padded to L4.
//   - B (the activations) takes CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: one fp32 per token per 128 columns,
//     stored outer-dimension (token) contiguous: scale (t, kb) at kb * T + t, no padding (PR #166752's
//     "[M, K // 128], stride [1, M]"; Avarok-Cybersecurity/atlas PR #989 found the same by measurement).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/fp8_blocks.h"
#include "runner/cuda/host_device.h"

namespace moeserve::cuda {

inline constexpr int64_t kFp8Block = 128;  // DeepSeek's weight_block_size and act_quant's group
// Bounds on one product, so that every index below fits comfortably in int64 and a launch in its grid limits.
inline constexpr int64_t kFp8GemmMaxRows = int64_t{1} << 20;     // tokens
inline constexpr int64_t kFp8GemmMaxFeatures = int64_t{1} << 18;  // N and K (DeepSeek's largest: 129,280)

MOESERVE_HD int64_t fp8_blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }
// The weight scale array's leading dimension: ceil(K / 128) rounded up to a multiple of 4.
MOESERVE_HD int64_t fp8_weight_scale_ld(int64_t K) { return (fp8_blocks(K) + 3) / 4 * 4; }
MOESERVE_HD int64_t fp8_weight_scale_count(int64_t N, int64_t K) { return fp8_blocks(N) * fp8_weight_scale_ld(K); }
MOESERVE_HD int64_t fp8_activation_scale_count(int64_t rows, int64_t K) { return fp8_blocks(K) * rows; }
MOESERVE_HD int64_t fp8_activation_scale_index(int64_t t, int64_t kb, int64_t rows) { return kb * rows + t; }

// Fails naming the shape unless 0 <= rows <= kFp8GemmMaxRows and 1 <= N, K <= kFp8GemmMaxFeatures.
void check_fp8_gemm_shape(int64_t rows, int64_t N, int64_t K);
// Why cuBLASLt cannot take the shape (empty when it can): e4m3 operands need K a multiple of 16 (16-byte leading
// dimensions) and the output's leading dimension N a multiple of 16 too. The token count must be a multiple of 4:
// the activation scales are token-contiguous columns of `rows` floats (scale (t, kb) at kb * rows + t), which are
// 16-byte aligned only then. NVIDIA's text on it was not at hand; users of this recipe report the cuBLAS docs'
// layout requiring it and pad the tokens to a multiple of 4 (and PyTorch PR #166752's "[M, K // 128], stride
// [1, M]" is the same layout); the first GPU run's failing plan had rows = 1. Partial 128-blocks are fine.
std::string fp8_gemm_cublaslt_refusal(int64_t rows, int64_t N, int64_t K);

// The checkpoint's scales of `w` ([ceil(N/128), ceil(K/128)] row-major) in cuBLASLt's weight layout above, the
// padding zero. w must use 128 x 128 blocks (fails naming its shape otherwise).
std::vector<float> fp8_weight_scales_for_cublaslt(const Fp8BlockMatrix& w);

// DeepSeek's act_quant (inference/kernel.py at HEAD) for rows x K floats: per row, per group of 128 columns (the
// last one partial when K % 128 != 0), s = max(amax, 1e-4) / 448 and q = e4m3(x / s) (round to nearest even,
// saturated at 448). q is [rows, K]; scales in cuBLASLt's activation layout (fp8_activation_scale_index).
void quantize_activations_fp8(const float* x, int64_t rows, int64_t K, uint8_t* q, float* scales);

// A bf16 (or any float) weight [N, K] quantised to 128 x 128 blocks at upload, for the FP8 dense projections of a
// model whose checkpoint has none (gpt-oss's QKV and output projections under --activation-dtype fp8): per block
// s = amax / 448 (1 for an all-zero block) and q = e4m3(w / s), round to nearest even, saturated at 448 (only
// rounding can reach it). q is [N, K] row-major; scales [ceil(N/128), ceil(K/128)] row-major, the checkpoint
// layout that Fp8BlockMatrix holds (fp8_weight_scales_for_cublaslt rearranges them). The device quantiser
// (fp8_gemm.h's Fp8QuantisedWeight) must give the same bytes and scales.
void quantize_weight_fp8_blocks(const float* w, int64_t N, int64_t K, uint8_t* q, float* scales);

}  // namespace moeserve::cuda
