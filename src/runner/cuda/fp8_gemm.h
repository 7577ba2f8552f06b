// DeepSeek-V3's FP8 dense projections on the GPU: y[T, N] = x[T, K] W[N, K]^T with W e4m3 in 128 x 128 blocks of
// one fp32 scale each (the checkpoint's format, model/fp8_blocks.h) and x bf16 or fp32, quantised on the device
// per token per 128 columns to e4m3 (DeepSeek's act_quant). The product runs on cuBLASLt's block-scaled FP8 path
// (Blas::linear_fp8_block, sm_90) or, where its heuristic has no algorithm, on a plain kernel that dequantises
// each weight block in its loop. Layouts and shape rules: fp8_block_layout.h. CPU reference: cpu::linear over the
// deepseek_v3::Linear (which keeps the activations fp32: the difference is act_quant's rounding).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "model/fp8_blocks.h"
#include "runner/cuda/blas.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

struct Fp8WeightView {
  const uint8_t* values = nullptr;  // [N, K] e4m3
  const float* scales = nullptr;    // [ceil(N/128), fp8_weight_scale_ld(K)]: cuBLASLt's layout
  int64_t rows = 0, cols = 0;       // N, K
};

// A weight on the device: its bytes as they are, its scales rearranged on the host (they are held as floats
// there, model/fp8_blocks.h) into cuBLASLt's layout, so no device kernel is needed for them.
class Fp8DeviceWeight {
 public:
  explicit Fp8DeviceWeight(const Fp8BlockMatrix& w);
  Fp8WeightView view() const { return {values_.as<uint8_t>(), scales_.as<float>(), rows_, cols_}; }

 private:
  DeviceBuffer values_, scales_;
  int64_t rows_ = 0, cols_ = 0;
};

// The quantised activations of one product: values [rows, K] e4m3 and scales (fp8_activation_scale_count floats,
// cuBLASLt's layout). Pointers 256-byte aligned (cudaMalloc's), as cuBLASLt's heuristic assumes.
struct Fp8Activations {
  uint8_t* values = nullptr;
  float* scales = nullptr;
};

// DeepSeek's act_quant of rows x K values of `type` into `out`: the same bytes and scales as
// quantize_activations_fp8 (fp8_block_layout.h) on the values as floats. One warp per (token, 128-column group).
// scale_rows (>= rows; 0: rows) is the token count the scale layout is laid out for (scale (t, kb) at
// kb * scale_rows + t): a product padded to a multiple of 4 tokens (fp8_dense_linear) reads that many.
void launch_fp8_quantize_activations(cudaStream_t stream, Precision type, const void* x, int64_t rows, int64_t K,
                                     const Fp8Activations& out, int64_t scale_rows = 0);

// A bf16 weight [N, K] quantised on the device into 128 x 128 blocks (gpt-oss's QKV and output projections under
// --activation-dtype fp8, made once at load): the same bytes as quantize_weight_fp8_blocks (fp8_block_layout.h)
// and its scales in cuBLASLt's layout (fp8_weight_scales_for_cublaslt's, the padding zero). One block of 256
// threads per weight block: its amax, then its values.
class Fp8QuantisedWeight {
 public:
  Fp8QuantisedWeight(cudaStream_t stream, const void* weight_bf16, int64_t N, int64_t K);
  Fp8WeightView view() const { return {values_.as<uint8_t>(), scales_.as<float>(), rows_, cols_}; }

 private:
  DeviceBuffer values_, scales_;
  int64_t rows_ = 0, cols_ = 0;
};

// The dense projections under --activation-dtype fp8: x [rows, K] bf16 quantised per token per 128 columns into
// scratch, then y [rows, N] fp32 = the block-scaled product on cuBLASLt, without the projection's bias: cuBLASLt
// refuses a bias epilogue with block scales (its heuristic answered NOT_SUPPORTED on an H100, cuBLASLt of CUDA 13.0,
// 2026-12-07), so the consumer adds it as it reads y (RopeParams::qkv_bias, launch_add_rms_norm's delta_bias), the
// same fp32 sum. cuBLASLt takes a multiple of 4 tokens, so the product runs over fp8_padded_rows(rows): the padding
// rows of scratch are left as they are and their outputs are written but meaningless, so scratch (values and
// scales) and y must hold the padded rows. False, launching nothing, where cuBLASLt refuses the shape or has no
// algorithm (the caller runs the bf16 product instead); *why then says why.
MOESERVE_HD constexpr int64_t fp8_padded_rows(int64_t rows) { return (rows + 3) / 4 * 4; }
bool fp8_dense_linear(cudaStream_t stream, Blas& blas, const void* x_bf16, int64_t rows, const Fp8WeightView& w,
                      const Fp8Activations& scratch, float* y, std::string* why = nullptr);
// The two halves of fp8_dense_linear, for a caller that quantises the input itself (launch_add_rms_norm_e4m3, which
// writes the scales for fp8_padded_rows(rows) tokens): whether cuBLASLt takes the product of `rows` tokens into
// `out` (false: *why says why), and the product alone on scratch as quantised, into y of type out.
bool fp8_dense_available(Blas& blas, int64_t rows, const Fp8WeightView& w, Precision out, std::string* why = nullptr);
void fp8_dense_product(cudaStream_t stream, Blas& blas, int64_t rows, const Fp8WeightView& w,
                       const Fp8Activations& scratch, Precision out, void* y);

// The plain product: one thread per output, sum over each 128-column block of e4m3 x e4m3 in fp32, times the two
// block scales, added into an fp32 accumulator (DeepSeek's fp8_gemm arithmetic); y fp32 or bf16 (`out`).
void launch_fp8_block_gemm_reference(cudaStream_t stream, const Fp8Activations& x, int64_t rows,
                                     const Fp8WeightView& w, Precision out, void* y);

enum class Fp8GemmPath { cublaslt, reference };
// The projection: quantise x into `scratch`, then the product on cuBLASLt when it takes the combination (a shape
// fp8_gemm_cublaslt_refusal names, or one cuBLASLt refuses, goes to the plain kernel with a warning giving the
// reason, once per shape). Returns the path taken; rows == 0 launches nothing.
Fp8GemmPath fp8_block_linear(cudaStream_t stream, Blas& blas, Precision x_type, const void* x, int64_t rows,
                             const Fp8WeightView& w, const Fp8Activations& scratch, Precision out, void* y);

}  // namespace moeserve::cuda
