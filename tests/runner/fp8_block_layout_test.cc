// The FP8 block GEMM's host-side facts (runner/cuda/fp8_block_layout.h), on the CPU so that CI covers them: the
// shape checks, cuBLASLt's weight scale layout (rows padded to a multiple of 4 blocks) and activation scale layout
// (token index contiguous), and the activation quantiser's CPU model, which the GPU kernel must match byte for byte
// (tests/runner/cuda/deepseek_ops_test.cc).
#include "runner/cuda/fp8_block_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

TEST(Fp8BlockLayout, WeightScaleLeadingDimensionIsBlocksRoundedToFour) {
  EXPECT_EQ(fp8_weight_scale_ld(7168), 56);   // DeepSeek's hidden size: 56 blocks, already a multiple of 4
  EXPECT_EQ(fp8_weight_scale_ld(1536), 12);
  EXPECT_EQ(fp8_weight_scale_ld(512), 4);
  EXPECT_EQ(fp8_weight_scale_ld(576), 8);     // 5 blocks, the last partial
  EXPECT_EQ(fp8_weight_scale_ld(100), 4);
  EXPECT_EQ(fp8_weight_scale_count(576, 7168), 5 * 56);
  EXPECT_EQ(fp8_activation_scale_count(7, 1040), 9 * 7);
  EXPECT_EQ(fp8_activation_scale_index(3, 2, 7), 2 * 7 + 3);
}

TEST(Fp8BlockLayout, WeightScalesArePaddedRowsOfTheCheckpointsArray) {
  Fp8BlockMatrix w;
  w.rows = 300;   // 3 row blocks, the last partial
  w.cols = 1040;  // 9 column blocks, padded to 12
  w.scales.resize(w.scale_rows() * w.scale_cols());
  for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = 1.0f + static_cast<float>(i);
  const std::vector<float> out = fp8_weight_scales_for_cublaslt(w);
  ASSERT_EQ(out.size(), size_t{3 * 12});
  for (int64_t nb = 0; nb < 3; ++nb)
    for (int64_t kb = 0; kb < 12; ++kb)
      EXPECT_EQ(out[nb * 12 + kb], kb < 9 ? w.scales[nb * 9 + kb] : 0.0f) << nb << ", " << kb;
}

TEST(Fp8BlockLayout, RefusesOtherBlocksAndBadShapes) {
  Fp8BlockMatrix w;
  w.rows = 256;
  w.cols = 256;
  w.block_rows = 64;
  w.scales.resize(w.scale_rows() * w.scale_cols());
  EXPECT_THROW(fp8_weight_scales_for_cublaslt(w), Error);
  w.block_rows = 128;
  w.scales.resize(3);
  EXPECT_THROW(fp8_weight_scales_for_cublaslt(w), Error);

  EXPECT_NO_THROW(check_fp8_gemm_shape(0, 576, 7168));
  EXPECT_NO_THROW(check_fp8_gemm_shape(kFp8GemmMaxRows, 129280, 7168));
  try {
    check_fp8_gemm_shape(7, 0, 7168);
    ADD_FAILURE() << "N = 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[7, 7168] x [0, 7168]^T"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_fp8_gemm_shape(-1, 576, 7168), Error);
  EXPECT_THROW(check_fp8_gemm_shape(kFp8GemmMaxRows + 1, 576, 7168), Error);
  EXPECT_THROW(check_fp8_gemm_shape(1, 576, kFp8GemmMaxFeatures + 1), Error);

  EXPECT_EQ(fp8_gemm_cublaslt_refusal(128, 576, 7168), "");
  EXPECT_EQ(fp8_gemm_cublaslt_refusal(300, 320, 1040), "");
  EXPECT_EQ(fp8_gemm_cublaslt_refusal(4, 576, 7168), "");
  EXPECT_NE(fp8_gemm_cublaslt_refusal(128, 576, 1000).find("K = 1000"), std::string::npos);
  EXPECT_NE(fp8_gemm_cublaslt_refusal(128, 200, 400).find("N = 200"), std::string::npos);
  // The activation scales' columns are `rows` floats apart: 16-byte aligned only at a multiple of 4 tokens.
  EXPECT_NE(fp8_gemm_cublaslt_refusal(1, 576, 7168).find("rows = 1 "), std::string::npos);
  EXPECT_NE(fp8_gemm_cublaslt_refusal(7, 576, 7168).find("rows = 7 "), std::string::npos);
}

// One value v of a group (or block) of largest magnitude amax, stored as byte q with scale s: zero in an all-zero
// group, +-448 for the largest, else within e4m3's half-ulp (2^-4 relative for normals; an absolute 2^-10 * s below
// 2^-6, the subnormals). r, c: its position, for the message.
void expect_quantised(float v, uint8_t q, float s, float amax, int64_t r, int64_t c) {
  if (amax == 0.0f) {
    EXPECT_EQ(q, 0) << r << ", " << c;
  } else if (std::fabs(v) == amax) {
    EXPECT_EQ(q & 0x7F, 0x7E) << r << ", " << c;  // 448
  } else {
    const float back = fp8_e4m3_to_float(q) * s;
    EXPECT_LE(std::fabs(back - v), std::max(std::fabs(v) * 0.0625f, s * 0x1p-10f)) << r << ", " << c;
  }
}

// act_quant's contract: per token and 128-column group (the last partial), scale max(amax, 1e-4) / 448, the
// group's largest magnitude stored as +-448, every value within e4m3's half-ulp (2^-4 relative for normals; an
// absolute 2^-10 * scale below 2^-6, the subnormals), an all-zero group stored as zeros.
TEST(Fp8BlockLayout, ActivationQuantiserFollowsActQuant) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 3, K = 200;  // two groups, the second 72 columns
  std::vector<float> x(rows * K);
  for (auto& v : x) v = normal(rng);
  for (int64_t k = 0; k < K; ++k) x[2 * K + k] = k < 128 ? 0.0f : 100.0f * x[2 * K + k];
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(fp8_activation_scale_count(rows, K));
  quantize_activations_fp8(x.data(), rows, K, q.data(), scales.data());
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t kb = 0; kb < 2; ++kb) {
      const int64_t k0 = kb * 128, k1 = std::min<int64_t>(K, k0 + 128);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(x[t * K + k]));
      const float s = scales[fp8_activation_scale_index(t, kb, rows)];
      EXPECT_EQ(s, std::max(amax, 1e-4f) / 448.0f) << t << ", " << kb;
      for (int64_t k = k0; k < k1; ++k) expect_quantised(x[t * K + k], q[t * K + k], s, amax, t, k);
    }
}

// The upload's weight quantiser (gpt-oss's dense projections under --activation-dtype fp8): per 128 x 128 block
// (the last row and column blocks partial) scale amax / 448, 1 for an all-zero block; the block's largest
// magnitude stored as +-448; every value within e4m3's half-ulp; the scales in the checkpoint's row-major layout.
TEST(Fp8BlockLayout, WeightQuantiserScalesEachBlockByItsLargestValue) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t N = 200, K = 300;  // 2 x 3 blocks, partial in both directions
  std::vector<float> w(N * K);
  for (auto& v : w) v = normal(rng);
  for (int64_t n = 128; n < N; ++n)
    for (int64_t k = 0; k < 128; ++k) w[n * K + k] = 0.0f;  // block (1, 0): all zeros
  w[5 * K + 290] = -3.0f;                                     // block (0, 2)'s largest, negative
  std::vector<uint8_t> q(w.size());
  std::vector<float> scales(2 * 3);
  quantize_weight_fp8_blocks(w.data(), N, K, q.data(), scales.data());
  for (int64_t nb = 0; nb < 2; ++nb)
    for (int64_t kb = 0; kb < 3; ++kb) {
      const int64_t n1 = std::min<int64_t>(N, (nb + 1) * 128), k1 = std::min<int64_t>(K, (kb + 1) * 128);
      float amax = 0.0f;
      for (int64_t n = nb * 128; n < n1; ++n)
        for (int64_t k = kb * 128; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
      const float s = scales[nb * 3 + kb];
      EXPECT_EQ(s, amax > 0.0f ? amax / 448.0f : 1.0f) << nb << ", " << kb;
      for (int64_t n = nb * 128; n < n1; ++n)
        for (int64_t k = kb * 128; k < k1; ++k) expect_quantised(w[n * K + k], q[n * K + k], s, amax, n, k);
    }
  EXPECT_EQ(scales[0 * 3 + 2], 3.0f / 448.0f);
  EXPECT_EQ(q[5 * K + 290], 0xFE);  // -448
  EXPECT_EQ(scales[1 * 3 + 0], 1.0f);
}

}  // namespace
}  // namespace moeserve::cuda
