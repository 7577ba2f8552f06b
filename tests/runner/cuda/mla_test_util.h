// Shared by the MLA kernels' tests, mla_decode_test.cc (cache write, decode, absorb -> decode -> un-absorb) and
// mla_absorb_test.cc (absorption and un-absorption): the widths under test, the CudaMla fixture (one class in both
// files, as gtest asks of one suite's tests) and a random kv_b as the CPU reads it and the device holds it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/make_tiny.h"
#include "model/deepseek_v3/weights.h"
#include "model/fp8_blocks.h"
#include "runner/cuda/fp8_gemm.h"
#include "util/bfloat16.h"

namespace moeserve::testing {

// The widths under test with their YaRN RoPE and softmax scale: DeepSeek-R1's (V3's: 128 heads, latent 512, rope
// 64) and the tiny model's (4 heads, half a pass of kMlaHeadsPerPass and a quarter of version 2's 16-head slab;
// latent 144, rope 16).
struct MlaWidths {
  std::string name;
  deepseek_v3::Config config;
};
inline const MlaWidths& v3_widths() {
  static const MlaWidths w{"v3", deepseek_v3::tiny_config({.shape = "deepseek-r1"})};
  return w;
}
inline const MlaWidths& tiny_widths() {
  static const MlaWidths w{"tiny", deepseek_v3::tiny_config({})};
  return w;
}

class CudaMla : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 170u};
};

// A random kv_b of config's shape as the CPU reads it (linear) and as the device holds it (view): fp8, e4m3 of
// N(0, 1) values with each 128 x 128 block's scale 2^u / sqrt(L), u uniform in [-1, 1] (a misplaced scale shows),
// uploaded as fp8_gemm.h's Fp8DeviceWeight holds FP8 weights; bf16 and f32, N(0, 1 / L). `magnitude` is |kv_b|
// in the same format: the bounds' sums of |a w| through the same CPU functions.
struct KvbWeight {
  std::vector<uint8_t> bytes, magnitude_bytes;
  deepseek_v3::Linear linear, magnitude;
  cuda::DeviceBuffer dense;
  std::optional<cuda::Fp8DeviceWeight> fp8;
  cuda::MlaKvbView view;

  KvbWeight(std::mt19937& rng, const deepseek_v3::Config& c, cuda::MlaWeightType type) {
    const int64_t rows = static_cast<int64_t>(c.num_heads) * c.kv_b_rows_per_head(), cols = c.kv_lora_rank;
    view = {nullptr, nullptr, type, c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank};
    const float sigma = type == cuda::MlaWeightType::fp8_block ? 1.0f : 1.0f / std::sqrt(static_cast<float>(cols));
    const auto w = random_floats(rng, static_cast<size_t>(rows * cols), 0.0f, sigma);
    const size_t element = type == cuda::MlaWeightType::f32 ? 4 : type == cuda::MlaWeightType::bf16 ? 2 : 1;
    bytes.resize(w.size() * element);
    magnitude_bytes.resize(bytes.size());
    for (size_t i = 0; i < w.size(); ++i) {
      if (type == cuda::MlaWeightType::fp8_block) {
        bytes[i] = float_to_fp8_e4m3(w[i]);
        magnitude_bytes[i] = bytes[i] & 0x7f;
      } else if (type == cuda::MlaWeightType::bf16) {
        const uint16_t bits = float_to_bf16(w[i]), abs_bits = bits & 0x7fff;
        std::memcpy(bytes.data() + 2 * i, &bits, 2);
        std::memcpy(magnitude_bytes.data() + 2 * i, &abs_bits, 2);
      } else {
        const float abs_value = std::fabs(w[i]);
        std::memcpy(bytes.data() + 4 * i, &w[i], 4);
        std::memcpy(magnitude_bytes.data() + 4 * i, &abs_value, 4);
      }
    }
    for (auto [l, data] : {std::pair{&linear, bytes.data()}, std::pair{&magnitude, magnitude_bytes.data()}}) {
      l->is_fp8 = type == cuda::MlaWeightType::fp8_block;
      if (l->is_fp8) {
        l->fp8.data = data;
        l->fp8.rows = rows;
        l->fp8.cols = cols;
      } else {
        l->dense = Matrix{type == cuda::MlaWeightType::bf16 ? DType::BF16 : DType::F32, data, rows, cols};
      }
    }
    if (type == cuda::MlaWeightType::fp8_block) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      linear.fp8.scales.resize(linear.fp8.scale_rows() * linear.fp8.scale_cols());
      for (float& scale : linear.fp8.scales) scale = std::exp2(u(rng)) / std::sqrt(static_cast<float>(cols));
      magnitude.fp8.scales = linear.fp8.scales;
      fp8.emplace(linear.fp8);
      view.values = fp8->view().values;
      view.scales = fp8->view().scales;
    } else {
      dense = cuda::to_device(bytes);
      view.values = dense.get();
    }
  }
};

}  // namespace moeserve::testing
