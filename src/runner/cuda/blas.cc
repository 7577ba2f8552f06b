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

  MOESERVE_CHECK(choose_algorithm(plan), "cuBLASLt has no algorithm for [{}, {}] x [{}, {}]^T: {}", rows, K, N, K,
                 plan.unavailable);
  return plans_.emplace(key, plan).first->second;
}

bool Blas::choose_algorithm(Plan& plan) {
  cublasLtMatmulPreference_t preference = nullptr;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace = workspace_.bytes();
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &workspace, sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // An unsupported combination answers NOT_SUPPORTED or INVALID_VALUE (the first GPU run's block-scaled plan got
  // INVALID_VALUE here) rather than zero results: each means no algorithm, with the status kept as the reason.
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                               preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan.found)
    plan.algo = result.algo;
  else if (status != CUBLAS_STATUS_SUCCESS)
    plan.unavailable = fmt::format("cublasLtMatmulAlgoGetHeuristic answered {}", cublasLtGetStatusString(status));
  else
    plan.unavailable = "cublasLtMatmulAlgoGetHeuristic found no algorithm";
  return plan.found;
}

// The same column-major view as plan(), e4m3 operands, block scales (fp8_block_layout.h gives their layouts and
// sources): A = W with BLK128x128_32F, B = xq with VEC128_32F. Fast accumulation stays off (its default), so the
// tensor cores' partial sums are promoted to fp32 as each 128-block is scaled.
// What the cuBLAS docs ask of FP8 (cublasLtMatmul(), "supported data types", as NVIDIA quoted it in
// NVIDIA/CUDALibrarySamples issue #172): 16-byte aligned matrix pointers, A transposed and B not ("TN"), compute
// type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F; its e4m3 x e4m3 rows list C = D = CUDA_R_16BF and
// C = D = CUDA_R_32F among the outputs. The two scale modes are cuBLAS 12.9+ and sm_90 only (NVIDIA's answer in
// CUDALibrarySamples issue #310). A block scale mode also needs its scale pointer set before the heuristic is
// asked: without it cublasLtMatmulAlgoGetHeuristic answers INVALID_VALUE ("The scaling mode for A scale ...
// requires a custom pointer for A scale", cuBLASLt's log in CUDALibrarySamples issue #274), which is what the
// first GPU run's plan got. The plan sets both to the workspace (cudaMalloc's, 256-byte aligned like the real
// scale arrays) and linear_fp8_block sets the real ones before each product.
// Any refusal on the way (a library without the scale modes, a heuristic's error) leaves the plan without an
// algorithm and its reason; only a failure to create descriptors (out of memory) throws.
Blas::Plan& Blas::fp8_block_plan(int64_t rows, int64_t N, int64_t K, Precision out) {
  Key key{-1 - static_cast<int>(out), rows, N, K, false};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan plan;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  MOESERVE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  const cudaDataType_t out_type = out == Precision::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  MOESERVE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, K, N, K));
  MOESERVE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, K, rows, K));
  MOESERVE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, out_type, N, rows, N));

  const int32_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const int32_t activation_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const void* placeholder = workspace_.get();
  const struct {
    cublasLtMatmulDescAttributes_t attribute;
    const void* value;
    size_t bytes;
    const char* name;
  } settings[] = {
      {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weight_mode, sizeof(weight_mode), "A_SCALE_MODE = BLK128x128_32F"},
      {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &activation_mode, sizeof(activation_mode), "B_SCALE_MODE = VEC128_32F"},
      {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof(placeholder), "A_SCALE_POINTER"},
      {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof(placeholder), "B_SCALE_POINTER"},
  };
  for (const auto& setting : settings) {
    const cublasStatus_t status = cublasLtMatmulDescSetAttribute(plan.desc, setting.attribute, setting.value,
                                                                 setting.bytes);
    if (status != CUBLAS_STATUS_SUCCESS) {
      plan.unavailable = fmt::format("cuBLASLt {} refuses {}: {}", cublasLtGetVersion(), setting.name,
                                     cublasLtGetStatusString(status));
      break;
    }
  }
  if (plan.unavailable.empty()) choose_algorithm(plan);
  return plans_.emplace(key, plan).first->second;
}

bool Blas::has_fp8_block_algorithm(int64_t rows, int64_t N, int64_t K, Precision out, std::string* why) {
  if (rows <= 0) {
    if (why != nullptr) *why = "no rows";
    return false;
  }
  const Plan& p = fp8_block_plan(rows, N, K, out);
  if (!p.found && why != nullptr) *why = p.unavailable;
  return p.found;
}

void Blas::linear_fp8_block(cudaStream_t stream, const uint8_t* xq, const float* x_scales, int64_t rows,
                            const uint8_t* weight, const float* weight_scales, int64_t N, int64_t K, Precision out,
                            void* y) {
  if (rows == 0) return;
  Plan& p = fp8_block_plan(rows, N, K, out);
  MOESERVE_CHECK(p.found, "cuBLASLt has no FP8 block-scaled algorithm for [{}, {}] x [{}, {}]^T ({} out): {}", rows,
                 K, N, K, out == Precision::bf16 ? "bf16" : "fp32", p.unavailable);
  MOESERVE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scales,
                                                       sizeof(weight_scales)));
  MOESERVE_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
  const float one = 1.0f, zero = 0.0f;
  MOESERVE_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &one, weight, p.a, xq, p.b, &zero, y, p.c, y, p.c, &p.algo,
                                       workspace_.get(), workspace_.bytes(), stream));
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
