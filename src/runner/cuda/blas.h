// The dense projections (QKV, attention output, router, unembedding) through cuBLASLt: y[rows, N] (fp32) =
// x[rows, K] W[N, K]^T + bias, with bf16 or fp32 operands and fp32 accumulation (no TF32), the bias added in
// the epilogue. Plans (descriptors and the heuristic's algorithm) are made once per shape and reused, also
// inside CUDA graph capture. CPU reference: cpu::linear.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
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

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool>;
  Plan& plan(Precision operands, int64_t rows, int64_t out_features, int64_t in_features, bool bias);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace moeserve::cuda
