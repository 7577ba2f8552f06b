// DeepSeek-V3's first CUDA pieces against the CPU reference, on fresh random inputs: the activation quantiser
// against its CPU model (the same e4m3 bytes and scales), the FP8 block-scaled projection (cuBLASLt and the plain
// kernel) against cpu::linear at DeepSeek's shapes and at partial-block ones, and the noaux_tc router against
// cpu::route_noaux_tc (the same experts; weights within 1e-6 relative), the tie rule included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda_test_util.h"
#include "random_fp8_weight.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/fp8_gemm.h"
#include "util/bfloat16.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::Precision;
using testing::download_as;
using testing::expect_error_within;
using testing::precision_name;
using testing::random_floats;
using testing::RandomFp8Weight;
using testing::round_to;
using testing::upload_as;

class DeepseekCuda : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 1717u};

  // Activations whose scale varies by token and by 128-column group (2^-3 .. 2^3), so that a transposed or
  // shifted activation scale array shows.
  std::vector<float> activations(int64_t T, int64_t K) {
    std::vector<float> x = random_floats(rng_, static_cast<size_t>(T) * K);
    std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t kb = 0; kb < cuda::fp8_blocks(K); ++kb) {
        const float factor = std::exp2(exponent(rng_));
        for (int64_t k = kb * 128; k < std::min(K, (kb + 1) * 128); ++k) x[t * K + k] *= factor;
      }
    return x;
  }
};

// The largest over rows of ||y_t - ref_t|| / ||ref_t||.
double max_row_error(const std::vector<float>& y, const std::vector<float>& ref, int64_t T, int64_t N) {
  double worst = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> row(y.begin() + t * N, y.begin() + (t + 1) * N);
    const std::vector<float> ref_row(ref.begin() + t * N, ref.begin() + (t + 1) * N);
    worst = std::max(worst, testing::relative_error(row, ref_row));
  }
  return worst;
}

TEST_F(DeepseekCuda, QuantizerMatchesCpuModel) {
  for (Precision type : {Precision::bf16, Precision::f32})
    for (auto [T, K] : {std::pair<int64_t, int64_t>{7, 7168}, std::pair<int64_t, int64_t>{3, 200}}) {
      std::vector<float> x = round_to(type, activations(T, K));
      std::fill(x.begin(), x.begin() + std::min<int64_t>(K, 128), 0.0f);  // an all-zero group: scale 1e-4 / 448
      std::vector<uint8_t> q(x.size());
      std::vector<float> scales(cuda::fp8_activation_scale_count(T, K));
      cuda::quantize_activations_fp8(x.data(), T, K, q.data(), scales.data());

      DeviceBuffer x_d = upload_as(type, x), q_d(q.size()), scales_d(scales.size() * 4);
      cuda::launch_fp8_quantize_activations(nullptr, type, x_d.get(), T, K, {q_d.as<uint8_t>(), scales_d.as<float>()});
      const std::string what = std::string(precision_name(type)) + " " + std::to_string(T) + "x" + std::to_string(K);
      EXPECT_EQ(cuda::to_host<uint8_t>(q_d.get(), q.size()), q) << what;
      EXPECT_EQ(cuda::to_host<float>(scales_d.get(), scales.size()), scales) << what;
    }
}

// Bounds, per row t on ||y_t - ref_t|| / ||ref_t||:
// - against cpu::linear on the quantised activations (dequantised exactly, the same products): the plain kernel
//   sums each 128-block then scales it, the CPU scales each element: fp32 rounding over K = 7168 terms, 1e-5.
//   cuBLASLt's Hopper FP8 tensor cores add a 128-block's products with fewer than fp32's bits before the block
//   is scaled and promoted (DeepSeek-V3's report measured about 14 bits): 2e-3. A bf16 output adds its own
//   rounding (2^-9 relative at most): 5e-3.
// - against cpu::linear on the activations as given (fp32, what the CPU runner computes): each activation is
//   rounded once to e4m3, |delta_k| <= 2^-4 relative (normals; the subnormals below 2^-6 of the scale are 2^-8 of
//   a group's largest value or less, rare in Gaussian data and bounded the same way in absolute terms). With the
//   weights independent of the rounding, E ||e_t||^2 / ||ref_t||^2 = sum_k delta_k^2 x_k^2 / sum_k x_k^2 <= 2^-8,
//   so the row error is at most 2^-4 = 6.25e-2 (about 0.026 expected: e4m3's rounding error is uniform over
//   +-half an ulp); the fp32 products' rounding is far below that.
TEST_F(DeepseekCuda, Fp8BlockLinearMatchesCpu) {
  ThreadPool pool(0);
  cuda::Blas blas;
  struct Shape {
    int64_t N, K;
  };
  // DeepSeek-V3's q_a_proj, kv_a_proj_with_mqa (a partial last row block) and an expert's gate; then partial
  // column blocks with padded scale rows (9 blocks -> 12), and a shape cuBLASLt refuses (N % 16 != 0). 1 and 7
  // tokens go to the plain kernel too (fp8_gemm_cublaslt_refusal: a multiple of 4 tokens); 128 and 300 must run
  // on cuBLASLt wherever the shape passes, in both outputs (Blas::fp8_block_plan cites what the docs allow), so a
  // refusal there fails with cuBLASLt's reason.
  for (Shape s : {Shape{1536, 7168}, Shape{576, 7168}, Shape{2048, 7168}, Shape{320, 1040}, Shape{200, 400}}) {
    const RandomFp8Weight weight(rng_, s.N, s.K);
    const cuda::Fp8DeviceWeight w_d(weight.linear.fp8);
    for (int64_t T : {1, 7, 128, 300}) {
      const bool cublaslt_shape = cuda::fp8_gemm_cublaslt_refusal(T, s.N, s.K).empty();
      const std::string shape = std::to_string(T) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K);
      const std::vector<float> x = round_to(Precision::bf16, activations(T, s.K));
      std::vector<uint8_t> q(x.size());
      std::vector<float> x_scales(cuda::fp8_activation_scale_count(T, s.K)), x_quantised(x.size());
      cuda::quantize_activations_fp8(x.data(), T, s.K, q.data(), x_scales.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < s.K; ++k)
          x_quantised[t * s.K + k] =
              fp8_e4m3_to_float(q[t * s.K + k]) * x_scales[cuda::fp8_activation_scale_index(t, k / 128, T)];
      std::vector<float> ref(static_cast<size_t>(T) * s.N), ref_quantised(ref.size());
      cpu::linear(pool, x.data(), T, weight.linear, ref.data());
      cpu::linear(pool, x_quantised.data(), T, weight.linear, ref_quantised.data());

      DeviceBuffer x_d = upload_as(Precision::bf16, x), q_d(q.size()), scales_d(x_scales.size() * 4),
                   y_d(ref.size() * 4);
      const cuda::Fp8Activations scratch{q_d.as<uint8_t>(), scales_d.as<float>()};
      for (Precision out : {Precision::f32, Precision::bf16}) {
        const std::string label = shape + " " + precision_name(out) + " out";
        const double rounding = out == Precision::bf16 ? 5e-3 : 0.0;
        const cuda::Fp8GemmPath path =
            cuda::fp8_block_linear(nullptr, blas, Precision::bf16, x_d.get(), T, w_d.view(), scratch, out, y_d.get());
        MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
        std::string why;
        if (cublaslt_shape && path != cuda::Fp8GemmPath::cublaslt) blas.has_fp8_block_algorithm(T, s.N, s.K, out, &why);
        EXPECT_EQ(path == cuda::Fp8GemmPath::cublaslt, cublaslt_shape)
            << label << ": " << (cublaslt_shape ? "cuBLASLt refused it: " + why : "cuBLASLt took a shape it refuses");
        const std::vector<float> y = download_as(out, y_d.get(), ref.size());
        const std::string name = path == cuda::Fp8GemmPath::cublaslt ? "cublaslt " : "plain ";
        expect_error_within("fp8 linear " + name + label + " vs quantised x", max_row_error(y, ref_quantised, T, s.N),
                            path == cuda::Fp8GemmPath::cublaslt ? std::max(2e-3, rounding) : std::max(1e-5, rounding));
        expect_error_within("fp8 linear " + name + label + " vs fp32 x", max_row_error(y, ref, T, s.N), 6.25e-2);

        cuda::launch_fp8_block_gemm_reference(nullptr, scratch, T, w_d.view(), out, y_d.get());
        const std::vector<float> plain = download_as(out, y_d.get(), ref.size());
        expect_error_within("fp8 linear plain " + label + " vs quantised x",
                            max_row_error(plain, ref_quantised, T, s.N), std::max(1e-5, rounding));
      }
    }
  }
}

// gpt-oss's dense projections under --activation-dtype fp8 (fp8_gemm.h's Fp8QuantisedWeight and fp8_dense_linear).
// The weight, bf16 with a magnitude that varies by 128 x 128 block, quantised on the device: quantize_weight_fp8_blocks'
// bytes, and its scales in cuBLASLt's layout (fp8_weight_scales_for_cublaslt), exactly. The product (its bias is the
// consumer's: RopeAndKvWriteMatchCpu, AddRmsNormMatchesCpu) at gpt-oss-120b's widths (K = 2,880: a partial last
// column block; K = 4,096), 8 tokens and 7 (padded to 8 inside) and 61 (64), on cuBLASLt (a refusal fails with its
// reason):
// - against the CPU on the dequantised weight and the quantised activations: 2e-3, as above;
// - against the bf16 weight and the activations as given: each side rounded once to e4m3 (2^-4 relative at most,
//   independent), so the row error is at most sqrt(2 x 2^-8) = 8.84e-2.
class Fp8DenseCuda : public DeepseekCuda {};
TEST_F(Fp8DenseCuda, QuantisedBf16WeightsMatchCpu) {
  cuda::Blas blas;
  struct Shape {
    int64_t N, K;
  };
  for (Shape s : {Shape{640, 2880}, Shape{2880, 4096}}) {
    std::vector<float> w = random_floats(rng_, static_cast<size_t>(s.N) * s.K, 0.0f, 0.02f);
    std::uniform_real_distribution<float> exponent(-4.0f, 4.0f);
    for (int64_t nb = 0; nb < cuda::fp8_blocks(s.N); ++nb)
      for (int64_t kb = 0; kb < cuda::fp8_blocks(s.K); ++kb) {
        const float factor = std::exp2(exponent(rng_));
        for (int64_t n = nb * 128; n < std::min(s.N, (nb + 1) * 128); ++n)
          for (int64_t k = kb * 128; k < std::min(s.K, (kb + 1) * 128); ++k) w[n * s.K + k] *= factor;
      }
    w = round_to(Precision::bf16, w);
    std::vector<uint8_t> wq(w.size());
    Fp8BlockMatrix model;
    model.rows = s.N;
    model.cols = s.K;
    model.scales.resize(model.scale_rows() * model.scale_cols());
    cuda::quantize_weight_fp8_blocks(w.data(), s.N, s.K, wq.data(), model.scales.data());
    model.data = wq.data();
    const std::string shape = std::to_string(s.N) + "x" + std::to_string(s.K);

    DeviceBuffer w_d = upload_as(Precision::bf16, w);
    const cuda::Fp8QuantisedWeight quantised(nullptr, w_d.get(), s.N, s.K);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const cuda::Fp8WeightView view = quantised.view();
    EXPECT_EQ(cuda::to_host<uint8_t>(view.values, wq.size()), wq) << shape << ": the weight's e4m3 bytes";
    EXPECT_EQ(cuda::to_host<float>(view.scales, cuda::fp8_weight_scale_count(s.N, s.K)),
              cuda::fp8_weight_scales_for_cublaslt(model))
        << shape << ": the weight's scales in cuBLASLt's layout";

    for (int64_t T : {8, 7, 61}) {
      const int64_t padded = cuda::fp8_padded_rows(T);
      const std::vector<float> x = round_to(Precision::bf16, activations(T, s.K));
      std::vector<uint8_t> q(x.size());
      std::vector<float> x_scales(cuda::fp8_activation_scale_count(T, s.K));
      cuda::quantize_activations_fp8(x.data(), T, s.K, q.data(), x_scales.data());
      std::vector<float> ref(static_cast<size_t>(T) * s.N), ref_quantised(ref.size());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < s.N; ++n) {
          double exact = 0.0, quantised_sum = 0.0;
          for (int64_t k = 0; k < s.K; ++k) {
            exact += static_cast<double>(x[t * s.K + k]) * w[n * s.K + k];
            const float xq = fp8_e4m3_to_float(q[t * s.K + k]) *
                             x_scales[cuda::fp8_activation_scale_index(t, k / 128, T)];
            quantised_sum += static_cast<double>(xq) * model.at(n, k);
          }
          ref[t * s.N + n] = static_cast<float>(exact);
          ref_quantised[t * s.N + n] = static_cast<float>(quantised_sum);
        }
      DeviceBuffer x_d = upload_as(Precision::bf16, x), q_d(padded * s.K),
                   scales_d(cuda::fp8_activation_scale_count(padded, s.K) * 4), y_d(padded * s.N * 4);
      const cuda::Fp8Activations scratch{q_d.as<uint8_t>(), scales_d.as<float>()};
      std::string why;
      const bool ran = cuda::fp8_dense_linear(nullptr, blas, x_d.get(), T, view, scratch, y_d.as<float>(), &why);
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string label = std::to_string(T) + "x" + shape;
      ASSERT_TRUE(ran) << label << ": cuBLASLt refused the FP8 product: " << why;
      const std::vector<float> y = cuda::to_host<float>(y_d.get(), ref.size());
      expect_error_within("fp8 dense linear " + label + " vs quantised operands",
                          max_row_error(y, ref_quantised, T, s.N), 2e-3);
      expect_error_within("fp8 dense linear " + label + " vs bf16 operands", max_row_error(y, ref, T, s.N), 8.84e-2);
      // The product alone on the same quantised rows into bf16 (gpt-oss's QKV rows for RoPE): the fp32 bound plus one
      // bf16 rounding (2^-9).
      ASSERT_TRUE(cuda::fp8_dense_available(blas, T, view, Precision::bf16, &why))
          << label << ": cuBLASLt refused the FP8 product into bf16: " << why;
      DeviceBuffer y16_d(padded * s.N * 2);
      cuda::fp8_dense_product(nullptr, blas, T, view, scratch, Precision::bf16, y16_d.get());
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      expect_error_within("fp8 dense product into bf16 " + label + " vs quantised operands",
                          max_row_error(download_as(Precision::bf16, y16_d.get(), ref.size()), ref_quantised, T, s.N),
                          2e-3 + 1.0 / 512);
    }
  }
}

// Random router logits whose every decision has a margin: group scores around the topk_group-th and choice
// scores around the top_k-th kept expert differ by more than 1e-4 (far above the ulp-level difference between
// the device's expf and the host's), recomputed here in double.
bool well_separated(const std::vector<float>& logits, const std::vector<float>& bias, const deepseek_v3::Config& c) {
  const int E = c.n_routed_experts, per_group = c.experts_per_group();
  std::vector<double> choice(E);
  for (int e = 0; e < E; ++e) choice[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))) + bias[e];
  std::vector<std::pair<double, int>> groups;
  for (int g = 0; g < c.n_group; ++g) {
    std::vector<double> v(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
    std::sort(v.rbegin(), v.rend());
    groups.emplace_back(v[0] + v[1], g);
  }
  std::sort(groups.rbegin(), groups.rend());
  if (c.topk_group < c.n_group && groups[c.topk_group - 1].first - groups[c.topk_group].first < 1e-4) return false;
  std::vector<double> kept;
  for (int i = 0; i < c.topk_group; ++i)
    for (int e = groups[i].second * per_group; e < (groups[i].second + 1) * per_group; ++e) kept.push_back(choice[e]);
  std::sort(kept.rbegin(), kept.rend());
  const int K = c.num_experts_per_tok;
  return K == static_cast<int>(kept.size()) || kept[K - 1] - kept[K] >= 1e-4;
}

deepseek_v3::Config routing_config(int experts, int groups, int topk_group, int top_k, bool normalize, double scale) {
  deepseek_v3::Config c;
  c.n_routed_experts = experts;
  c.n_group = groups;
  c.topk_group = topk_group;
  c.num_experts_per_tok = top_k;
  c.norm_topk_prob = normalize;
  c.routed_scaling_factor = scale;
  return c;
}

void expect_router_matches_cpu(const deepseek_v3::Config& c, const std::vector<float>& logits,
                               const std::vector<float>& bias, int T, const std::string& what) {
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  std::vector<int32_t> experts(static_cast<size_t>(T) * K);
  std::vector<float> weights(experts.size());
  for (int t = 0; t < T; ++t)
    cpu::route_noaux_tc(logits.data() + static_cast<int64_t>(t) * E, bias.data(), c, experts.data() + t * K,
                        weights.data() + t * K);
  DeviceBuffer logits_d = cuda::to_device(logits), bias_d = cuda::to_device(bias), experts_d(experts.size() * 4),
               weights_d(weights.size() * 4), counts_d = cuda::to_device(std::vector<int32_t>(E, 0));
  const cuda::NoauxTcRouting routing{E, c.n_group, c.topk_group, K, c.norm_topk_prob,
                                     static_cast<float>(c.routed_scaling_factor)};
  cuda::launch_route_noaux_tc(nullptr, logits_d.as<float>(), bias_d.as<float>(), T, routing, experts_d.as<int32_t>(),
                              weights_d.as<float>(), counts_d.as<int32_t>());
  EXPECT_EQ(cuda::to_host<int32_t>(experts_d.get(), experts.size()), experts) << what;
  const std::vector<float> got = cuda::to_host<float>(weights_d.get(), weights.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - weights[i]) / std::fabs(weights[i]));
  expect_error_within("noaux_tc weights " + what, worst, 1e-6);
  std::vector<int32_t> counts(E, 0);
  for (int32_t e : experts) ++counts[e];
  EXPECT_EQ(cuda::to_host<int32_t>(counts_d.get(), E), counts) << what;
}

TEST_F(DeepseekCuda, NoauxTcRouterMatchesCpu) {
  const int T = 300;
  // DeepSeek-V3 / R1; one group; groups of two; no normalisation with fewer experts than the lanes' last round.
  for (const auto& c : {routing_config(256, 8, 4, 8, true, 2.5), routing_config(256, 1, 1, 8, true, 2.5),
                        routing_config(16, 8, 3, 4, true, 1.0), routing_config(72, 4, 2, 6, false, 1.5)}) {
    const int E = c.n_routed_experts;
    std::uniform_real_distribution<float> uniform(0.0f, 0.1f);
    std::vector<float> bias(E);
    for (auto& b : bias) b = uniform(rng_);
    std::vector<float> logits;
    while (static_cast<int>(logits.size()) < T * E) {
      const std::vector<float> token = random_floats(rng_, E, 0.0f, 2.0f);
      if (well_separated(token, bias, c)) logits.insert(logits.end(), token.begin(), token.end());
    }
    const std::string what = std::to_string(E) + " experts, " + std::to_string(c.n_group) + " groups";
    expect_router_matches_cpu(c, logits, bias, T, what);
  }
}

// Ties go to the lower index, for groups and for experts: a token whose logits are all equal (no bias) keeps
// groups 0 .. topk_group - 1 and takes experts 0 .. 7 of group 0, weights 2.5 / 8; a token whose second group is
// a copy of its first ties the two groups (the first is kept first).
TEST_F(DeepseekCuda, NoauxTcRouterBreaksTiesTowardTheLowerIndex) {
  const deepseek_v3::Config c = routing_config(256, 8, 4, 8, true, 2.5);
  const std::vector<float> bias(256, 0.0f);
  std::vector<float> logits(256, 0.5f);
  std::vector<float> copied = random_floats(rng_, 256);
  std::copy_n(copied.begin(), 32, copied.begin() + 32);
  logits.insert(logits.end(), copied.begin(), copied.end());
  expect_router_matches_cpu(c, logits, bias, 2, "ties");

  DeviceBuffer logits_d = cuda::to_device(logits), bias_d = cuda::to_device(bias), experts_d(8 * 4), weights_d(8 * 4);
  cuda::launch_route_noaux_tc(nullptr, logits_d.as<float>(), bias_d.as<float>(), 1, {256, 8, 4, 8, true, 2.5f},
                              experts_d.as<int32_t>(), weights_d.as<float>(), nullptr);
  std::vector<int32_t> first(8);
  std::iota(first.begin(), first.end(), 0);
  EXPECT_EQ(cuda::to_host<int32_t>(experts_d.get(), 8), first);
  for (float w : cuda::to_host<float>(weights_d.get(), 8)) EXPECT_NEAR(w, 2.5f / 8, 1e-6f);
}

}  // namespace
}  // namespace moeserve
