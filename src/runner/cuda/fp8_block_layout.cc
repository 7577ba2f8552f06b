#include "runner/cuda/fp8_block_layout.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace moeserve::cuda {

void check_fp8_gemm_shape(int64_t rows, int64_t N, int64_t K) {
  MOESERVE_CHECK(rows >= 0 && rows <= kFp8GemmMaxRows && N >= 1 && N <= kFp8GemmMaxFeatures && K >= 1 &&
                     K <= kFp8GemmMaxFeatures,
                 "FP8 block GEMM [{}, {}] x [{}, {}]^T: rows must be 0..{} and N, K 1..{}", rows, K, N, K,
                 kFp8GemmMaxRows, kFp8GemmMaxFeatures);
}

std::string fp8_gemm_cublaslt_refusal(int64_t rows, int64_t N, int64_t K) {
  if (K % 16 != 0) return fmt::format("K = {} is not a multiple of 16 (e4m3 leading dimensions)", K);
  if (N % 16 != 0) return fmt::format("N = {} is not a multiple of 16 (the output's leading dimension)", N);
  if (rows % 4 != 0)
    return fmt::format("rows = {} is not a multiple of 4 (the activation scales' columns, 16-byte aligned)", rows);
  return {};
}

std::vector<float> fp8_weight_scales_for_cublaslt(const Fp8BlockMatrix& w) {
  MOESERVE_CHECK(w.block_rows == kFp8Block && w.block_cols == kFp8Block,
                 "FP8 weight [{}, {}] has {} x {} blocks; the CUDA FP8 GEMM takes 128 x 128", w.rows, w.cols,
                 w.block_rows, w.block_cols);
  MOESERVE_CHECK(static_cast<int64_t>(w.scales.size()) == w.scale_rows() * w.scale_cols(),
                 "FP8 weight [{}, {}]: {} scales, expected {} x {}", w.rows, w.cols, w.scales.size(), w.scale_rows(),
                 w.scale_cols());
  const int64_t ld = fp8_weight_scale_ld(w.cols);
  std::vector<float> out(fp8_weight_scale_count(w.rows, w.cols), 0.0f);
  for (int64_t nb = 0; nb < w.scale_rows(); ++nb)
    std::copy_n(w.scales.data() + nb * w.scale_cols(), w.scale_cols(), out.data() + nb * ld);
  return out;
}

void quantize_activations_fp8(const float* x, int64_t rows, int64_t K, uint8_t* q, float* scales) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t kb = 0; kb < fp8_blocks(K); ++kb) {
      const int64_t k0 = kb * kFp8Block, k1 = std::min(K, k0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(x[t * K + k]));
      const float s = std::max(amax, 1e-4f) / kFp8E4m3Max;
      for (int64_t k = k0; k < k1; ++k) q[t * K + k] = float_to_fp8_e4m3(x[t * K + k] / s);
      scales[fp8_activation_scale_index(t, kb, rows)] = s;
    }
}

void quantize_weight_fp8_blocks(const float* w, int64_t N, int64_t K, uint8_t* q, float* scales) {
  const int64_t col_blocks = fp8_blocks(K);
  for (int64_t nb = 0; nb < fp8_blocks(N); ++nb)
    for (int64_t kb = 0; kb < col_blocks; ++kb) {
      const int64_t n0 = nb * kFp8Block, n1 = std::min(N, n0 + kFp8Block);
      const int64_t k0 = kb * kFp8Block, k1 = std::min(K, k0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
      const float s = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t k = k0; k < k1; ++k) q[n * K + k] = float_to_fp8_e4m3(w[n * K + k] / s);
      scales[nb * col_blocks + kb] = s;
    }
}

}  // namespace moeserve::cuda
