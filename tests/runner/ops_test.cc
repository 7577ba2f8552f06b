// CPU reference ops: decode (weights read in place) and prefill (rows converted once) paths give the same bits,
// and the MXFP4 dot equals a dot with the dequantised row.
#include <gtest/gtest.h>

#include <random>

#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/dot.h"
#include "runner/cpu/ops.h"
#include "test_util.h"

namespace moeserve {
namespace {

std::vector<float> random_rows(int64_t T, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(T * K);
  for (auto& v : x) v = normal(rng);
  return x;
}

TEST(CpuOps, DecodeAndPrefillPathsGiveTheSameBits) {
  auto checkpoint = Checkpoint::open(testing::tiny_model());
  const auto& layer = checkpoint->weights().layers[1];
  ThreadPool pool(2);
  const int64_t T = 11, H = layer.q.cols;
  auto x = random_rows(T, H, 1);
  std::vector<float> batched(T * layer.q.rows), single(layer.q.rows);
  cpu::linear(pool, x.data(), T, layer.q, layer.q_bias.data(), batched.data());
  for (int64_t t = 0; t < T; ++t) {
    cpu::linear(pool, x.data() + t * H, 1, layer.q, layer.q_bias.data(), single.data());
    ASSERT_EQ(0, std::memcmp(single.data(), batched.data() + t * layer.q.rows, single.size() * sizeof(float)));
  }
  const auto& mlp1 = layer.mlp1;
  std::vector<float> expert_batched(T * mlp1.out_features), expert_single(mlp1.out_features);
  cpu::expert_linear(pool, x.data(), T, mlp1, 3, expert_batched.data());
  for (int64_t t = 0; t < T; ++t) {
    cpu::expert_linear(pool, x.data() + t * H, 1, mlp1, 3, expert_single.data());
    ASSERT_EQ(0, std::memcmp(expert_single.data(), expert_batched.data() + t * mlp1.out_features,
                             expert_single.size() * sizeof(float)));
  }
}

TEST(CpuOps, Mxfp4DotEqualsTheDequantisedRowDot) {
  auto checkpoint = Checkpoint::open(testing::tiny_model());
  const auto& m = checkpoint->weights().layers[0].mlp1;
  const int64_t K = m.in_features;
  auto x = random_rows(1, K, 2);
  std::vector<float> even(K / 2), odd(K / 2);
  for (int64_t k = 0; k < K / 2; ++k) {
    even[k] = x[2 * k];
    odd[k] = x[2 * k + 1];
  }
  for (int64_t row = 0; row < m.out_features; row += 5) {
    double expected = 0;
    for (int64_t k = 0; k < K; ++k) expected += static_cast<double>(x[k]) * m.weight(2, row, k);
    const int64_t blocks_per_row = K / 32;
    const int64_t r = 2 * m.out_features + row;
    float got = cpu::dot_mxfp4({even.data(), odd.data()}, m.blocks + r * blocks_per_row * 16, m.scales + r * blocks_per_row, K);
    EXPECT_NEAR(got, expected, 1e-4 * (1 + std::abs(expected)));
  }
}

}  // namespace
}  // namespace moeserve
