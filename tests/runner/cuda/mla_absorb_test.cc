// The MLA absorption and un-absorption kernels (mla_absorb.cu) against the CPU at DeepSeek-V3's widths and the tiny
// model's, kv_b fp8 (block-scaled), bf16 and fp32, T = 1, 7, 64 (absorb -> decode -> un-absorb end to end is in
// mla_decode_test.cc): per element against the CPU's own steps on the same kv_b values (cpu::add_scaled_row for q~,
// cpu::row_dot for W_UV o~, cpu::rope_adjacent_pairs for q_pe). Two fp32 sums of the same K products, each in some
// order of fmas, differ by at most 2 gamma_K sum_k |a_k w_k| (gamma_K ~ K 2^-24, the textbook bound for any
// summation order); a bf16 output adds its rounding, half an ulp <= 2^-8 of the value. The RoPE: cosf and sinf
// within 2 ulp (CUDA's table), glibc's within 1, and a few fp32 roundings: 1e-6 of factor * (|x0| + |x1|) is about
// twice that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "mla_test_util.h"
#include "model/deepseek_v3/config.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::MlaWeightType;
using testing::CudaMla;
using testing::KvbWeight;
using testing::MlaWidths;
using testing::tiny_widths;
using testing::v3_widths;

const char* weight_name(MlaWeightType type) {
  return type == MlaWeightType::f32 ? "f32" : type == MlaWeightType::bf16 ? "bf16" : "fp8";
}

// Two fp32 sums of the same K products differ by at most this times sum |a w| (2 gamma_K, with room for the
// magnitude's own fp32 sum).
double sum_bound(int K) { return 2.1 * K * 0x1p-24; }
// error / bound, with an all-zero bound (no products) passing only an exact result.
double fraction_of(double error, double bound) { return bound > 0 ? error / bound : error == 0 ? 0.0 : INFINITY; }

// Absorption of T tokens at random positions: the worst element's error as a fraction of its bound.
double absorb_error(const deepseek_v3::Config& c, const KvbWeight& kv_b, int T, std::mt19937& rng, ThreadPool& pool) {
  const int H = c.num_heads, nope = c.qk_nope_head_dim, R = c.qk_rope_head_dim, qk = c.qk_head_dim(),
            L = c.kv_lora_rank, per_head = c.kv_b_rows_per_head();
  const auto q = testing::random_floats(rng, static_cast<size_t>(T) * H * qk);
  std::vector<int32_t> positions(T);
  std::uniform_int_distribution<int32_t> position(0, 4095);
  for (int32_t& p : positions) p = position(rng);
  const auto inv_freq = c.rope_inverse_frequencies();
  const float factor = 1.25f * c.rope_attention_factor();  // as the cache write's test: a factor left out shows
  DeviceBuffer q_d = cuda::to_device(q), positions_d = cuda::to_device(positions),
               inv_freq_d = cuda::to_device(inv_freq), q_latent_d(static_cast<size_t>(T) * H * L * 4),
               q_rope_d(static_cast<size_t>(T) * H * R * 4);
  cuda::StepView step;
  step.num_tokens = T;
  step.positions = positions_d.as<int32_t>();
  cuda::launch_mla_absorb(nullptr,
                          {q_d.as<float>(), R, inv_freq_d.as<float>(), factor, kv_b.view, q_latent_d.as<float>(),
                           q_rope_d.as<float>()},
                          step);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q_latent = cuda::to_host<float>(q_latent_d.get(), static_cast<size_t>(T) * H * L);
  const auto q_rope = cuda::to_host<float>(q_rope_d.get(), static_cast<size_t>(T) * H * R);

  std::vector<double> worst(static_cast<size_t>(T) * H, 0.0);
  pool.parallel_for(worst.size(), 1, [&](size_t begin, size_t end) {
    std::vector<float> ref(L), magnitude(L), rotated(R);
    for (size_t item = begin; item < end; ++item) {
      const int t = static_cast<int>(item) / H, h = static_cast<int>(item) % H;
      const float* q_nope = q.data() + item * qk;
      std::fill(ref.begin(), ref.end(), 0.0f);
      std::fill(magnitude.begin(), magnitude.end(), 0.0f);
      for (int d = 0; d < nope; ++d) {
        cpu::add_scaled_row(kv_b.linear, static_cast<int64_t>(h) * per_head + d, q_nope[d], ref.data());
        cpu::add_scaled_row(kv_b.magnitude, static_cast<int64_t>(h) * per_head + d, std::fabs(q_nope[d]),
                            magnitude.data());
      }
      for (int k = 0; k < L; ++k)
        worst[item] = std::max(worst[item], fraction_of(std::fabs(q_latent[item * L + k] - ref[k]),
                                                        sum_bound(nope) * magnitude[k]));
      std::copy_n(q_nope + nope, R, rotated.begin());
      cpu::rope_adjacent_pairs(rotated.data(), 1, R, R, positions[t], inv_freq, factor);
      for (int j = 0; j < R; ++j) {
        const double bound = 1e-6 * factor * (std::fabs(q_nope[nope + j]) + std::fabs(q_nope[nope + (j ^ 1)]));
        worst[item] = std::max(worst[item], fraction_of(std::fabs(q_rope[item * R + j] - rotated[j]), bound));
      }
    }
  });
  return *std::max_element(worst.begin(), worst.end());
}

// Un-absorption of T tokens into `out_type`: the worst element's error as a fraction of its bound.
double unabsorb_error(const deepseek_v3::Config& c, const KvbWeight& kv_b, int T, cuda::Precision out_type,
                      std::mt19937& rng, ThreadPool& pool) {
  const int H = c.num_heads, nope = c.qk_nope_head_dim, V = c.v_head_dim, L = c.kv_lora_rank,
            per_head = c.kv_b_rows_per_head();
  const auto latent_out = testing::random_floats(rng, static_cast<size_t>(T) * H * L);
  const size_t outputs = static_cast<size_t>(T) * H * V;
  DeviceBuffer latent_out_d = cuda::to_device(latent_out), out_d(outputs * cuda::element_bytes(out_type));
  cuda::launch_mla_unabsorb(nullptr, out_type, {latent_out_d.as<float>(), kv_b.view, out_d.get()}, T);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = testing::download_as(out_type, out_d.get(), outputs);

  const double rounding = out_type == cuda::Precision::bf16 ? 0x1p-8 : 0.0;
  std::vector<double> worst(static_cast<size_t>(T) * H, 0.0);
  pool.parallel_for(worst.size(), 1, [&](size_t begin, size_t end) {
    std::vector<float> abs_latent(L);
    for (size_t item = begin; item < end; ++item) {
      const int h = static_cast<int>(item) % H;
      const float* o = latent_out.data() + item * L;
      for (int k = 0; k < L; ++k) abs_latent[k] = std::fabs(o[k]);
      for (int e = 0; e < V; ++e) {
        const int64_t row = static_cast<int64_t>(h) * per_head + nope + e;
        const double ref = cpu::row_dot(kv_b.linear, row, o);
        const double sums = sum_bound(L) * cpu::row_dot(kv_b.magnitude, row, abs_latent.data());
        const double bound = rounding * std::fabs(ref) + (1.0 + rounding) * sums;
        worst[item] = std::max(worst[item], fraction_of(std::fabs(out[item * V + e] - ref), bound));
      }
    }
  });
  return *std::max_element(worst.begin(), worst.end());
}

constexpr MlaWeightType kWeightTypes[] = {MlaWeightType::fp8_block, MlaWeightType::bf16, MlaWeightType::f32};

TEST_F(CudaMla, AbsorbMatchesTheCpu) {
  ThreadPool pool(0);
  for (const MlaWidths* w : {&v3_widths(), &tiny_widths()})
    for (MlaWeightType type : kWeightTypes) {
      const KvbWeight kv_b(rng_, w->config, type);
      for (int T : {1, 7, 64})
        testing::expect_error_within("mla absorb " + w->name + " kv_b " + weight_name(type) + " T " +
                                         std::to_string(T) + " (worst element / its bound)",
                                     absorb_error(w->config, kv_b, T, rng_, pool), 1.0);
    }
}

TEST_F(CudaMla, UnabsorbMatchesTheCpu) {
  ThreadPool pool(0);
  for (const MlaWidths* w : {&v3_widths(), &tiny_widths()})
    for (MlaWeightType type : kWeightTypes) {
      const KvbWeight kv_b(rng_, w->config, type);
      for (cuda::Precision out_type : {cuda::Precision::f32, cuda::Precision::bf16})
        for (int T : {1, 7, 64})
          testing::expect_error_within("mla unabsorb " + w->name + " kv_b " + weight_name(type) + " out " +
                                           testing::precision_name(out_type) + " T " + std::to_string(T) +
                                           " (worst element / its bound)",
                                       unabsorb_error(w->config, kv_b, T, out_type, rng_, pool), 1.0);
    }
}

}  // namespace
}  // namespace moeserve
