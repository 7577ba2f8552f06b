// The dense projections (QKV, attention output, router, unembedding) through cuBLASLt: y[rows, N] (fp32) =
// x[rows, K] W[N, K]^T + bias, with bf16 or fp32 operands and fp32 accumulation (no TF32), the bias added in
// the epilogue. Plans (descriptors and the heuristic's algorithm) are made once per shape and reused, also
// inside CUDA graph capture. CPU reference: cpu::linear.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"

namespace moeserve::cuda {

class Blas {
 public:
  explicit Blas(size_t workspace_bytes = size_t{64} << 20);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // x and weight share the operand precision; bias may be null.
  void linear(cudaStream_t stream, Precision operands, const void* x, int64_t rows, const void* weight,
              int64_t out_features, int64_t in_features, const float* bias, float* y);

  // FP8 block-scaled: y[rows, N] (fp32 or bf16, `out`) = dequant(xq) dequant(W)^T, xq [rows, K] e4m3 with one
  // scale per token per 128 columns, W [N, K] e4m3 with one per 128 x 128 block, both in the layouts of
  // fp8_block_layout.h. False, with the reason in *why when given, where cuBLASLt refuses the combination (a
  // library without the scale modes, a heuristic answering an error or no algorithm): fp8_gemm.h then runs the
  // plain kernel. Never throws for a refusal; the shape must pass fp8_gemm_cublaslt_refusal.
  bool has_fp8_block_algorithm(int64_t rows, int64_t N, int64_t K, Precision out, std::string* why = nullptr);
  void linear_fp8_block(cudaStream_t stream, const uint8_t* xq, const float* x_scales, int64_t rows,
                        const uint8_t* weight, const float* weight_scales, int64_t N, int64_t K, Precision out,
                        void* y);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
    std::string unavailable;  // why not found: the call and cuBLASLt's status, or "no algorithm"
  };
  // (operands, rows, N, K, bias); FP8 block plans have operands = -1 - (output precision).
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool>;
  Plan& plan(Precision operands, int64_t rows, int64_t out_features, int64_t in_features, bool bias);
  Plan& fp8_block_plan(int64_t rows, int64_t N, int64_t K, Precision out);
  bool choose_algorithm(Plan& plan);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace moeserve::cuda
