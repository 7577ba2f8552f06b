// Random FP8 weights in DeepSeek's checkpoint format, for the DeepSeek CUDA tests (deepseek_ops_test.cc's
// projections; deepseek_runner_test.cc's and deepseek_experts_wgmma_test.cc's routed experts). Not
// tests/deepseek_test_util.h: that library builds without CUDA, and this helper draws through cuda_test_util.h's
// random_floats.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "model/deepseek_v3/weights.h"
#include "model/fp8_blocks.h"
#include "runner/cuda/deepseek_kernels.h"

namespace moeserve::testing {

// Values N(0, 1/K) times a factor per 128 x 128 block (2^-2 .. 2^2, so that every block's scale differs), each block
// quantised with scale amax / 448 as the checkpoint was. `linear` points into `bytes`: moved, never copied.
struct RandomFp8Weight {
  std::vector<uint8_t> bytes;
  deepseek_v3::Linear linear;

  RandomFp8Weight(std::mt19937& rng, int64_t N, int64_t K) : bytes(static_cast<size_t>(N) * K) {
    Fp8BlockMatrix& m = linear.fp8;
    linear.is_fp8 = true;
    m.rows = N;
    m.cols = K;
    m.scales.resize(m.scale_rows() * m.scale_cols());
    std::vector<float> w = random_floats(rng, bytes.size(), 0.0f, 1.0f / std::sqrt(static_cast<float>(K)));
    std::uniform_real_distribution<float> exponent(-2.0f, 2.0f);
    for (int64_t nb = 0; nb < m.scale_rows(); ++nb)
      for (int64_t kb = 0; kb < m.scale_cols(); ++kb) {
        const float factor = std::exp2(exponent(rng));
        const int64_t n1 = std::min(N, (nb + 1) * 128), k1 = std::min(K, (kb + 1) * 128);
        float amax = 0.0f;
        for (int64_t n = nb * 128; n < n1; ++n)
          for (int64_t k = kb * 128; k < k1; ++k) amax = std::max(amax, std::fabs(w[n * K + k] *= factor));
        const float scale = amax / kFp8E4m3Max;
        m.scales[nb * m.scale_cols() + kb] = scale;
        for (int64_t n = nb * 128; n < n1; ++n)
          for (int64_t k = kb * 128; k < k1; ++k) bytes[n * K + k] = float_to_fp8_e4m3(w[n * K + k] / scale);
      }
    m.data = bytes.data();
  }
  RandomFp8Weight(const RandomFp8Weight&) = delete;
  RandomFp8Weight& operator=(const RandomFp8Weight&) = delete;
  RandomFp8Weight(RandomFp8Weight&&) = default;  // the bytes' buffer moves with them
};

// E random FP8 matrices [N, K] as the CPU reads them (weights[e].linear) and stacked as the device holds them
// (`device`: the values, and the scales in cuBLASLt's layout, fp8_weight_scales_for_cublaslt).
struct RandomFp8Experts {
  std::vector<RandomFp8Weight> weights;
  cuda::DeviceBuffer values, scales;
  cuda::DeviceMatrix device;

  RandomFp8Experts(std::mt19937& rng, int E, int64_t N, int64_t K) {
    std::vector<uint8_t> all_values;
    std::vector<float> all_scales;
    weights.reserve(E);
    for (int e = 0; e < E; ++e) {
      const RandomFp8Weight& w = weights.emplace_back(rng, N, K);
      all_values.insert(all_values.end(), w.bytes.begin(), w.bytes.end());
      const std::vector<float> s = cuda::fp8_weight_scales_for_cublaslt(w.linear.fp8);
      all_scales.insert(all_scales.end(), s.begin(), s.end());
    }
    values = cuda::to_device(all_values);
    scales = cuda::to_device(all_scales);
    device = {cuda::WeightType::fp8_block, values.get(), scales.as<float>(), N, K, E};
  }
};

}  // namespace moeserve::testing
