#include "runner/cuda/blas.h"

#include "util/error.h"

namespace moeserve::cuda {
namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt: {} failed: {}", call, cublasLtGetStatusString(status));
}
#define MOESERVE_CUBLAS_CHECK(call) check((call), #call)

}  // namespace

Blas::Blas(size_t workspace_bytes) : workspace_(workspace_bytes) { MOESERVE_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

Blas::~Blas() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cublasLtDestroy(handle_);
}

// Column-major view: y^T [N, rows] = W [K, N]^T (W row-major [N, K] is column-major K x N) * x^T [K, rows].
Blas::Plan& Blas::plan(Precision operands, int64_t rows, int64_t N, int64_t K, bool bias) {
  Key key{static_cast<int>(operands), rows, N, K, bias};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan;
  const cudaDataType_t type = operands == Precision::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  MOESERVE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_32F;
    MOESERVE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    MOESERVE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                         sizeof(bias_type)));
  }
  MOESERVE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, type, K, N, K));
  MOESERVE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, type, K, rows, K));
  MOESERVE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, N, rows, N));

  cublasLtMatmulPreference_t preference = nullptr;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace = workspace_.bytes();
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &workspace, sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, preference,
                                                       1, &result, &found));
  cublasLtMatmulPreferenceDestroy(preference);
  MOESERVE_CHECK(found > 0, "cuBLASLt has no algorithm for [{}, {}] x [{}, {}]^T", rows, K, N, K);
  plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

void Blas::linear(cudaStream_t stream, Precision operands, const void* x, int64_t rows, const void* weight,
                  int64_t out_features, int64_t in_features, const float* bias, float* y) {
  if (rows == 0) return;
  Plan& p = plan(operands, rows, out_features, in_features, bias != nullptr);
  if (bias != nullptr)
    MOESERVE_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float one = 1.0f, zero = 0.0f;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &one, weight, p.a, x, p.b, &zero, y, p.c, y, p.c, &p.algo,
                                       workspace_.get(), workspace_.bytes(), stream));
}

}  // namespace moeserve::cuda
