// The row-wise CUDA kernels against the CPU reference operations (runner/cpu/ops.h), on fresh random inputs:
// residual add + RMSNorm (plain, dense delta, expert combine), the combine alone, the cuBLASLt projections, YaRN
// RoPE with the KV write (and fused with the QKV projection), the router's top-k, the embedding gather and greedy argmax. Bounds are on ||out - ref|| / ||ref||.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"
#include "model/gpt_oss/make_tiny.h"
#include "runner/cpu/ops.h"
#include "runner/cuda/blas.h"
#include "runner/cuda/fp8_block_layout.h"
#include "sampling/sampler.h"
#include "util/bfloat16.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::Precision;
using testing::download_as;
using testing::expect_error_within;
using testing::precision_name;
using testing::random_floats;
using testing::relative_error;
using testing::round_to;
using testing::upload_as;

class CudaKernels : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  Precision precision() const { return GetParam(); }
  // bf16 outputs are rounded once (2^-9 relative at most); fp32 ones differ by summation order only.
  double rounding_bound() const { return precision() == Precision::bf16 ? 4e-3 : 1e-5; }
  std::string label(const std::string& what) const { return what + " " + precision_name(precision()); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 12345u};
};

// The expert combine at top_k 4 and 8 (the kernels that load every slot's row before summing) and 3 (the loop), with
// some slots on another expert-parallel rank (row -1) at 8; and of bf16 rows (ExpertCombine::y_bf16) at 4 and 3, the
// reference on the same bf16 values.
TEST_P(CudaKernels, AddRmsNormMatchesCpu) {
  const int T = 7, H = 2880;
  const float eps = 1e-5f;
  const auto scale = random_floats(rng_, H, 1.0f, 0.1f);
  struct Case {
    int k, mode;  // mode 0: plain, 1: dense delta, 2: expert combine, 3: expert combine of bf16 rows (y_bf16),
                  // 4: dense delta plus a bias (delta_bias)
  };
  for (const Case c : {Case{4, 0}, Case{4, 1}, Case{4, 2}, Case{8, 2}, Case{3, 2}, Case{4, 3}, Case{3, 3}, Case{4, 4}}) {
    const int k = c.k, mode = c.mode;
    auto x = random_floats(rng_, T * H, 0.0f, 3.0f);
    const auto delta = random_floats(rng_, T * H);
    const auto bias = random_floats(rng_, H);
    auto y = random_floats(rng_, T * k * H);
    if (mode == 3) y = round_to(Precision::bf16, y);
    std::vector<int32_t> slot_row(T * k);
    std::iota(slot_row.begin(), slot_row.end(), 0);
    std::shuffle(slot_row.begin(), slot_row.end(), rng_);
    if (k == 8) slot_row[1] = slot_row[T * k - 3] = slot_row[T * k - 1] = -1;
    auto weights = random_floats(rng_, T * k, 0.25f, 0.1f);

    DeviceBuffer x_d = cuda::to_device(x), delta_d = cuda::to_device(delta), bias_d = cuda::to_device(bias),
                 y_d = mode == 3 ? upload_as(Precision::bf16, y) : cuda::to_device(y),
                 slot_d = cuda::to_device(slot_row), weights_d = cuda::to_device(weights),
                 scale_d = cuda::to_device(scale), out_d(T * H * cuda::element_bytes(precision()));
    cuda::ExpertCombine combine{y_d.as<float>(), slot_d.as<int32_t>(), weights_d.as<float>(), k};
    if (mode == 3) combine.y = nullptr, combine.y_bf16 = y_d.get();
    const bool dense = mode == 1 || mode == 4, experts = mode == 2 || mode == 3;
    cuda::launch_add_rms_norm(nullptr, precision(), x_d.as<float>(), dense ? delta_d.as<float>() : nullptr,
                              experts ? &combine : nullptr, scale_d.as<float>(), T, H, eps, out_d.get(),
                              mode == 4 ? bias_d.as<float>() : nullptr);
    // The reference: the CPU runner's residual adds (the combine sums slots first), then cpu::rms_norm.
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < H; ++i) {
        float add = 0.0f;
        if (mode == 1) add = delta[t * H + i];
        if (mode == 4) add = delta[t * H + i] + bias[i];
        if (experts)
          for (int j = 0; j < k; ++j)
            if (slot_row[t * k + j] >= 0) add += weights[t * k + j] * y[slot_row[t * k + j] * H + i];
        x[t * H + i] += add;
      }
    std::vector<float> ref(T * H);
    cpu::rms_norm(x.data(), scale.data(), T, H, eps, ref.data());
    const std::string mode_name[] = {"plain", "dense delta", "expert combine, top_k " + std::to_string(k),
                                     "expert combine of bf16 rows, top_k " + std::to_string(k),
                                     "dense delta plus bias"};
    expect_error_within(label("rms_norm " + mode_name[mode] + " residual"),
                        relative_error(cuda::to_host<float>(x_d.get(), T * H), x), 1e-6);
    expect_error_within(label("rms_norm " + mode_name[mode]),
                        relative_error(download_as(precision(), out_d.get(), T * H), ref), rounding_bound());
  }
}

// The combine alone (a tensor-parallel rank's, summed over the ranks afterwards): the same sums the fused one adds.
TEST(CudaKernelsExact, MoeCombineMatchesCpu) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 7u);
  const int T = 9, H = 2880, k = 4;
  const auto y = random_floats(rng, T * k * H);
  std::vector<int32_t> slot_row(T * k);
  std::iota(slot_row.begin(), slot_row.end(), 0);
  std::shuffle(slot_row.begin(), slot_row.end(), rng);
  const auto weights = random_floats(rng, T * k, 0.25f, 0.1f);
  DeviceBuffer y_d = cuda::to_device(y), slot_d = cuda::to_device(slot_row), weights_d = cuda::to_device(weights),
               out_d(T * H * 4);
  const cuda::ExpertCombine combine{y_d.as<float>(), slot_d.as<int32_t>(), weights_d.as<float>(), k};
  cuda::launch_moe_combine(nullptr, combine, T, H, out_d.as<float>());
  std::vector<float> ref(T * H, 0.0f);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j)
      for (int i = 0; i < H; ++i) ref[t * H + i] += weights[t * k + j] * y[slot_row[t * k + j] * H + i];
  expect_error_within("moe_combine", relative_error(cuda::to_host<float>(out_d.get(), T * H), ref), 1e-6);
}

// The norm writing its rows quantised for an FP8 projection (launch_add_rms_norm_e4m3) against the same norm into
// fp32 rows, then the CPU's act_quant (quantize_activations_fp8) of those rows: the same e4m3 bytes and scales, the
// scales laid out for more (padded) tokens than the step has; and the same residual. Widths: gpt-oss's 2,880 (a last
// group of 64 columns; the block's last warp half past the row), 4,096, 200 (two warps, the second partial) and
// 8,192 (two float4s a thread). Plain, dense delta plus bias, and the combine of bf16 expert rows at top_k 4.
TEST(CudaKernelsExact, AddRmsNormE4m3MatchesTheNormThenActQuant) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 31u);
  const int T = 7, k = 4, scale_rows = 8;
  const float eps = 1e-5f;
  for (const int H : {2880, 4096, 200, 8192})
    for (const int mode : {0, 1, 2}) {  // plain, dense delta plus bias, combine of bf16 rows
      const auto x = random_floats(rng, T * H, 0.0f, 3.0f);
      const auto scale = random_floats(rng, H, 1.0f, 0.1f);
      const auto delta = random_floats(rng, T * H), bias = random_floats(rng, H);
      const auto y = round_to(Precision::bf16, random_floats(rng, T * k * H));
      std::vector<int32_t> slot_row(T * k);
      std::iota(slot_row.begin(), slot_row.end(), 0);
      std::shuffle(slot_row.begin(), slot_row.end(), rng);
      const auto weights = random_floats(rng, T * k, 0.25f, 0.1f);
      DeviceBuffer x_d = cuda::to_device(x), x_ref_d = cuda::to_device(x), delta_d = cuda::to_device(delta),
                   bias_d = cuda::to_device(bias), y_d = upload_as(Precision::bf16, y),
                   slot_d = cuda::to_device(slot_row), weights_d = cuda::to_device(weights),
                   scale_d = cuda::to_device(scale), rows_d(T * H * 4), q_d(scale_rows * H),
                   scales_d(cuda::fp8_activation_scale_count(scale_rows, H) * 4);
      cuda::ExpertCombine combine{nullptr, slot_d.as<int32_t>(), weights_d.as<float>(), k};
      combine.y_bf16 = y_d.get();
      const float* dense = mode == 1 ? delta_d.as<float>() : nullptr;
      const float* dense_bias = mode == 1 ? bias_d.as<float>() : nullptr;
      const cuda::ExpertCombine* experts = mode == 2 ? &combine : nullptr;
      MOESERVE_CUDA_CHECK(cudaMemset(scales_d.get(), 0xff, scales_d.bytes()));  // NaN where a scale is not written
      cuda::launch_add_rms_norm_e4m3(nullptr, x_d.as<float>(), dense, experts, scale_d.as<float>(), T, H, eps,
                                     q_d.as<uint8_t>(), scales_d.as<float>(), scale_rows, dense_bias);
      cuda::launch_add_rms_norm(nullptr, Precision::f32, x_ref_d.as<float>(), dense, experts, scale_d.as<float>(), T, H,
                                eps, rows_d.get(), dense_bias);
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string label = "add_rms_norm_e4m3 H " + std::to_string(H) + " mode " + std::to_string(mode);
      EXPECT_EQ(cuda::to_host<float>(x_d.get(), T * H), cuda::to_host<float>(x_ref_d.get(), T * H))
          << label << ": the residual";
      const auto rows = cuda::to_host<float>(rows_d.get(), T * H);
      std::vector<uint8_t> q_ref(T * H);
      std::vector<float> scales_ref(cuda::fp8_activation_scale_count(T, H));
      cuda::quantize_activations_fp8(rows.data(), T, H, q_ref.data(), scales_ref.data());
      EXPECT_EQ(cuda::to_host<uint8_t>(q_d.get(), T * H), q_ref) << label << ": the e4m3 bytes";
      const auto scales = cuda::to_host<float>(scales_d.get(), cuda::fp8_activation_scale_count(scale_rows, H));
      for (int t = 0; t < T; ++t)
        for (int64_t kb = 0; kb < cuda::fp8_blocks(H); ++kb)
          ASSERT_EQ(scales[cuda::fp8_activation_scale_index(t, kb, scale_rows)],
                    scales_ref[cuda::fp8_activation_scale_index(t, kb, T)])
              << label << ": the scale of token " << t << ", group " << kb;
    }
}

TEST_P(CudaKernels, LinearMatchesCpu) {
  ThreadPool pool(0);
  cuda::Blas blas;
  for (auto [T, N, K] : {std::tuple{1, 5120, 2880}, std::tuple{7, 2880, 4096}, std::tuple{64, 128, 2880}}) {
    const auto x = random_floats(rng_, T * K);
    const auto w = random_floats(rng_, static_cast<size_t>(N) * K, 0.0f, 1.0f / std::sqrt(static_cast<float>(K)));
    const auto bias = random_floats(rng_, N);
    std::vector<uint16_t> w_bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_bits[i] = float_to_bf16(w[i]);
    const Matrix W{DType::BF16, reinterpret_cast<const uint8_t*>(w_bits.data()), N, K};
    std::vector<float> ref(static_cast<size_t>(T) * N);
    cpu::linear(pool, x.data(), T, W, bias.data(), ref.data());

    std::vector<float> w_values(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_values[i] = bf16_to_float(w_bits[i]);
    DeviceBuffer x_d = upload_as(precision(), x), w_d = upload_as(precision(), w_values),
                 bias_d = cuda::to_device(bias), y_d(static_cast<size_t>(T) * N * 4);
    blas.linear(nullptr, precision(), x_d.get(), T, w_d.get(), N, K, bias_d.as<float>(), y_d.as<float>());
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    // bf16: the input rows are rounded to bf16 (the CPU keeps them fp32), so ~2^-9 / sqrt(3) relative.
    expect_error_within(label("linear " + std::to_string(T) + "x" + std::to_string(N) + "x" + std::to_string(K)),
                        relative_error(cuda::to_host<float>(y_d.get(), ref.size()), ref),
                        precision() == Precision::bf16 ? 1e-2 : 1e-5);
  }
}

TEST(CudaKernelsExact, DenseGemvMatchesCpu) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 3u);
  ThreadPool pool(0);
  for (auto [N, K] : {std::pair{5120, 2880}, std::pair{2880, 4096}, std::pair{201, 64}})
    for (int T = 1; T <= cuda::kMaxDenseGemvRows; ++T) {
      const auto x = random_floats(rng, static_cast<size_t>(T) * K);
      const auto w = round_to(Precision::bf16, random_floats(rng, static_cast<size_t>(N) * K, 0.0f, 0.02f));
      const auto bias = random_floats(rng, N);
      std::vector<uint16_t> w_bits(w.size());
      for (size_t i = 0; i < w.size(); ++i) w_bits[i] = float_to_bf16(w[i]);
      const Matrix W{DType::BF16, reinterpret_cast<const uint8_t*>(w_bits.data()), N, K};
      std::vector<float> ref(static_cast<size_t>(T) * N);
      cpu::linear(pool, x.data(), T, W, bias.data(), ref.data());
      DeviceBuffer x_d = upload_as(Precision::bf16, x), w_d = upload_as(Precision::bf16, w),
                   bias_d = cuda::to_device(bias), y_d(ref.size() * 4);
      cuda::launch_dense_gemv(nullptr, x_d.get(), T, w_d.get(), N, K, bias_d.as<float>(), y_d.as<float>());
      expect_error_within("dense gemv bf16 " + std::to_string(T) + "x" + std::to_string(N) + "x" + std::to_string(K),
                          relative_error(cuda::to_host<float>(y_d.get(), ref.size()), ref), 1e-2);
    }
}

// The output projection with the residual add + RMSNorm in its last block (decode steps of 1-4 tokens) against
// launch_dense_gemv then launch_add_rms_norm (each checked against the CPU above): the projection, the updated
// residual and the normed rows must be the same bytes, for bf16 and fp32 outputs, at hidden sizes whose add + RMSNorm
// block is partial (2,880: 720 float4s on 736 threads), small (64) and of two float4s a thread (7,168); launched
// twice on one counter, which each launch leaves at zero.
TEST(CudaKernelsExact, OutputProjectionAddRmsNormFusedMatchesTheTwoLaunches) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 19u);
  DeviceBuffer counter = cuda::to_device(std::vector<int32_t>(1, 0));
  for (auto [H, K] : {std::pair{2880, 4096}, std::pair{64, 2880}, std::pair{7168, 1024}})
    for (int T = 1; T <= cuda::kMaxDenseGemvRows; ++T)
      for (Precision out_type : {Precision::bf16, Precision::f32}) {
        const std::string what = std::to_string(T) + " x " + std::to_string(H) + " from " + std::to_string(K) + ", " +
                                 precision_name(out_type) + " out";
        ASSERT_TRUE(cuda::dense_gemv_add_rms_norm_supported(T, K, H)) << what;
        const auto in = random_floats(rng, static_cast<size_t>(T) * K);
        const auto w = round_to(Precision::bf16, random_floats(rng, static_cast<size_t>(H) * K, 0.0f, 0.02f));
        const auto bias = random_floats(rng, H);
        const auto x = random_floats(rng, static_cast<size_t>(T) * H, 0.0f, 3.0f);
        const auto scale = random_floats(rng, H, 1.0f, 0.1f);
        const size_t rows = static_cast<size_t>(T) * H, out_bytes = rows * cuda::element_bytes(out_type);
        DeviceBuffer in_d = upload_as(Precision::bf16, in), w_d = upload_as(Precision::bf16, w),
                     bias_d = cuda::to_device(bias), scale_d = cuda::to_device(scale), x_two = cuda::to_device(x),
                     delta_two(rows * 4), out_two(out_bytes);
        cuda::launch_dense_gemv(nullptr, in_d.get(), T, w_d.get(), H, K, bias_d.as<float>(), delta_two.as<float>());
        cuda::launch_add_rms_norm(nullptr, out_type, x_two.as<float>(), delta_two.as<float>(), nullptr,
                                  scale_d.as<float>(), T, H, 1e-5f, out_two.get());
        for (int launch = 0; launch < 2; ++launch) {
          DeviceBuffer x_one = cuda::to_device(x), delta_one(rows * 4), out_one(out_bytes);
          cuda::launch_dense_gemv_add_rms_norm(nullptr, out_type, in_d.get(), T, w_d.get(), K, bias_d.as<float>(),
                                               delta_one.as<float>(), x_one.as<float>(), scale_d.as<float>(), H, 1e-5f,
                                               out_one.get(), counter.as<int32_t>());
          MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
          const std::string at = what + ", launch " + std::to_string(launch);
          EXPECT_EQ(cuda::to_host<uint32_t>(delta_one.get(), rows), cuda::to_host<uint32_t>(delta_two.get(), rows)) << at;
          EXPECT_EQ(cuda::to_host<uint32_t>(x_one.get(), rows), cuda::to_host<uint32_t>(x_two.get(), rows)) << at;
          EXPECT_EQ(cuda::to_host<uint8_t>(out_one.get(), out_bytes), cuda::to_host<uint8_t>(out_two.get(), out_bytes))
              << at;
          EXPECT_EQ(cuda::to_host<int32_t>(counter.get(), 1), std::vector<int32_t>(1, 0)) << at;
        }
      }
  EXPECT_FALSE(cuda::dense_gemv_add_rms_norm_supported(5, 2880, 2880));
  EXPECT_FALSE(cuda::dense_gemv_add_rms_norm_supported(1, 4104, 2880));
  EXPECT_FALSE(cuda::dense_gemv_add_rms_norm_supported(1, 2880, 2882));
  EXPECT_THROW(cuda::launch_dense_gemv_add_rms_norm(nullptr, Precision::bf16, nullptr, 5, nullptr, 2880, nullptr,
                                                    nullptr, nullptr, nullptr, 2880, 1e-5f, nullptr, nullptr),
               std::exception);
}

// One layer with gpt-oss's attention widths (64 query heads, 8 KV heads of 64), the RoPE tests' model.
ModelConfig attention_width_config() {
  TinyModelOptions options;
  options.layers = 1;
  options.heads = 64;
  options.kv_heads = 8;
  options.vocab = 1000;
  return tiny_model_config(options);
}

TEST_P(CudaKernels, RopeAndKvWriteMatchCpu) {
  const ModelConfig c = attention_width_config();
  const int heads = c.num_heads, kv_heads = c.num_kv_heads, D = c.head_dim, block_size = 16;
  const std::vector<int> starts = {0, 31, 4095, 131000}, lengths = {5, 1, 20, 3};
  std::vector<int> ends;
  for (size_t s = 0; s < starts.size(); ++s) ends.push_back(starts[s] + lengths[s]);
  int64_t num_blocks = 0;
  auto tables = testing::scattered_tables(rng_, starts, ends, c.sliding_window, block_size, &num_blocks);
  ForwardBatch batch;
  std::vector<std::vector<int32_t>> ids;
  std::vector<int32_t> positions;
  for (size_t s = 0; s < starts.size(); ++s) {
    ids.emplace_back(lengths[s], 7);
    for (int i = 0; i < lengths[s]; ++i) positions.push_back(starts[s] + i);
  }
  for (size_t s = 0; s < starts.size(); ++s) {
    SequenceStep step;
    step.tokens = ids[s];
    step.start_position = starts[s];
    step.block_tables = {tables[s]};
    batch.sequences.push_back(step);
  }
  const KvCacheLayout layout{block_size, num_blocks};
  testing::DeviceStep device_step(batch, c, layout, cuda::kNoPrefillTiles);
  const int T = static_cast<int>(positions.size()), width = (heads + 2 * kv_heads) * D;
  const auto qkv = random_floats(rng_, static_cast<size_t>(T) * width);
  const auto inv_freq = rope_inverse_frequencies(c);
  const float concentration = static_cast<float>(c.rope_concentration());
  const size_t block_elements = 2 * kv_heads * block_size * D;
  // The rows go up less a bias that RopeParams::qkv_bias adds back as the kernel reads them (the FP8 QKV
  // projection's), so the reference on qkv holds to the same bounds (the fp32 difference is an ulp). Without a bias
  // the kernel is checked by QkvRopeFusedMatchesTheTwoLaunches (the GEMV adds it there).
  const auto qkv_bias = random_floats(rng_, width);
  std::vector<float> qkv_less_bias(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv_less_bias[i] = qkv[i] - qkv_bias[i % width];
  DeviceBuffer qkv_d = cuda::to_device(qkv_less_bias), qkv_bias_d = cuda::to_device(qkv_bias),
               inv_freq_d = cuda::to_device(inv_freq),
               q_d(static_cast<size_t>(T) * heads * D * cuda::element_bytes(precision()));

  // bf16: the rows also as bf16 (RopeParams::qkv_bf16, the FP8 product's output), the reference on those values.
  const auto qkv_less_bias_bf16 = round_to(Precision::bf16, qkv_less_bias);
  DeviceBuffer qkv_bf16_d = upload_as(Precision::bf16, qkv_less_bias_bf16);
  std::vector<float> q, k, v;
  auto reference = [&](bool rows_bf16) {
    q.assign(static_cast<size_t>(T) * heads * D, 0.0f);
    k.assign(static_cast<size_t>(T) * kv_heads * D, 0.0f);
    v.assign(static_cast<size_t>(T) * kv_heads * D, 0.0f);
    std::vector<float> rows = qkv;
    if (rows_bf16)
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = qkv_less_bias_bf16[i] + qkv_bias[i % width];
    for (int t = 0; t < T; ++t) {
      const float* row = rows.data() + static_cast<size_t>(t) * width;
      std::copy_n(row, heads * D, q.data() + static_cast<size_t>(t) * heads * D);
      std::copy_n(row + heads * D, kv_heads * D, k.data() + static_cast<size_t>(t) * kv_heads * D);
      std::copy_n(row + (heads + kv_heads) * D, kv_heads * D, v.data() + static_cast<size_t>(t) * kv_heads * D);
    }
    cpu::apply_rope(q.data(), T, heads, D, positions.data(), inv_freq, concentration);
    cpu::apply_rope(k.data(), T, kv_heads, D, positions.data(), inv_freq, concentration);
  };

  // The KV write as each cache type of the precision stores it; fp8 with K and V scales other than 1. An e4m3
  // value is within 2^-4 of its input (3 mantissa bits, round to nearest), so ||error|| <= 2^-4 ||input||.
  using cuda::KvDtype;
  // Both kernel versions (launch_rope_kv_write's version: 1, a pair a thread; 2, four pairs a thread).
  for (const int version : {1, 2})
  for (const bool rows_bf16 : precision() == Precision::f32 ? std::vector{false} : std::vector{false, true})
  for (KvDtype kv : precision() == Precision::f32 ? std::vector{KvDtype::f32} : std::vector{KvDtype::bf16, KvDtype::fp8_e4m3}) {
    reference(rows_bf16);
    const bool fp8 = kv == KvDtype::fp8_e4m3;
    const float k_scale = fp8 ? 0.25f : 1.0f, v_scale = fp8 ? 3.0f : 1.0f;
    DeviceBuffer kv_d(num_blocks * block_elements * cuda::kv_element_bytes(kv));
    cuda::RopeParams params{qkv_d.as<float>(), heads, kv_heads, D, inv_freq_d.as<float>(), concentration, q_d.get(),
                            cuda::KvView{kv_d.get(), block_size, 1, kv_heads, D, kv}, 0, 0, k_scale, v_scale};
    params.qkv_bias = qkv_bias_d.as<float>();
    if (rows_bf16) params.qkv_bf16 = qkv_bf16_d.get();
    cuda::launch_rope_kv_write(nullptr, precision(), params, device_step.view, version);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto cache = fp8 ? testing::from_e4m3(cuda::to_host<uint8_t>(kv_d.get(), num_blocks * block_elements),
                                                [&](size_t i) { return (i % block_elements) < block_elements / 2 ? k_scale : v_scale; })
                           : download_as(precision(), kv_d.get(), num_blocks * block_elements);
    std::vector<float> k_out, v_out;
    int t = 0;
    for (size_t s = 0; s < starts.size(); ++s)
      for (int i = 0; i < lengths[s]; ++i, ++t) {
        const int p = starts[s] + i;
        const size_t block = tables[s][p / block_size];
        for (int which = 0; which < 2; ++which)
          for (int h = 0; h < kv_heads; ++h) {
            const size_t at = block * block_elements + ((which * kv_heads + h) * block_size + p % block_size) * D;
            (which == 0 ? k_out : v_out).insert((which == 0 ? k_out : v_out).end(), cache.begin() + at,
                                                cache.begin() + at + D);
          }
      }
    const std::string cache_type = std::string(fp8 ? " fp8 cache" : "") + (rows_bf16 ? " bf16 rows" : "") +
                                   " version " + std::to_string(version);
    expect_error_within(label("rope q" + cache_type),
                        relative_error(download_as(precision(), q_d.get(), q.size()), q), rounding_bound());
    const double bound = fp8 ? 0.0625 : rounding_bound();
    expect_error_within(label("rope k in cache" + cache_type), relative_error(k_out, k), bound);
    expect_error_within(label("v in cache" + cache_type), relative_error(v_out, v), bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaKernels, ::testing::Values(Precision::bf16, Precision::f32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

// The QKV projection with RoPE and the KV write in one launch (decode steps of 1-4 tokens) against the two launches
// it replaces, each checked against the CPU above (DenseGemvMatchesCpu, RopeAndKvWriteMatchCpu): q and the whole KV
// cache must be the same bytes, for bf16 and fp8 caches, decode-shaped steps (one token a sequence) and a verify-shaped
// one (one sequence of several tokens).
TEST(CudaKernelsExact, QkvRopeFusedMatchesTheTwoLaunches) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 17u);
  const ModelConfig c = attention_width_config();
  const int heads = c.num_heads, kv_heads = c.num_kv_heads, D = c.head_dim, block_size = 16, K = 2880;
  const int N = (heads + 2 * kv_heads) * D;
  const auto w = round_to(Precision::bf16, random_floats(rng, static_cast<size_t>(N) * K, 0.0f, 0.02f));
  const auto bias = random_floats(rng, N);
  const auto inv_freq = rope_inverse_frequencies(c);
  DeviceBuffer w_d = upload_as(Precision::bf16, w), bias_d = cuda::to_device(bias),
               inv_freq_d = cuda::to_device(inv_freq);
  struct Case {
    std::vector<int> starts, lengths;
  };
  const std::vector<Case> cases = {{{4095}, {1}},
                                   {{0, 131000}, {1, 1}},
                                   {{31, 7, 2047}, {1, 1, 1}},
                                   {{0, 31, 4095, 131000}, {1, 1, 1, 1}},
                                   {{4095}, {4}},
                                   {{100, 3000}, {2, 1}}};
  for (const Case& cs : cases) {
    std::vector<int> ends;
    for (size_t s = 0; s < cs.starts.size(); ++s) ends.push_back(cs.starts[s] + cs.lengths[s]);
    int64_t num_blocks = 0;
    auto tables = testing::scattered_tables(rng, cs.starts, ends, c.sliding_window, block_size, &num_blocks);
    ForwardBatch batch;
    std::vector<std::vector<int32_t>> ids;
    for (int length : cs.lengths) ids.emplace_back(length, 7);
    int T = 0;
    for (size_t s = 0; s < cs.starts.size(); ++s) {
      SequenceStep step;
      step.tokens = ids[s];
      step.start_position = cs.starts[s];
      step.block_tables = {tables[s]};
      batch.sequences.push_back(step);
      T += cs.lengths[s];
    }
    const KvCacheLayout layout{block_size, num_blocks};
    testing::DeviceStep device_step(batch, c, layout, cuda::kNoPrefillTiles);
    const auto x = random_floats(rng, static_cast<size_t>(T) * K);
    DeviceBuffer x_d = upload_as(Precision::bf16, x), qkv_d(static_cast<size_t>(T) * N * 4);
    const size_t q_bytes = static_cast<size_t>(T) * heads * D * 2;
    for (cuda::KvDtype kv : {cuda::KvDtype::bf16, cuda::KvDtype::fp8_e4m3}) {
      const bool fp8 = kv == cuda::KvDtype::fp8_e4m3;
      const size_t cache_bytes = num_blocks * 2 * kv_heads * block_size * D * cuda::kv_element_bytes(kv);
      DeviceBuffer q_two(q_bytes), q_one(q_bytes), q_v2(q_bytes), kv_two(cache_bytes), kv_one(cache_bytes),
          kv_v2(cache_bytes);
      MOESERVE_CUDA_CHECK(cudaMemset(kv_two.get(), 0, cache_bytes));
      MOESERVE_CUDA_CHECK(cudaMemset(kv_one.get(), 0, cache_bytes));
      MOESERVE_CUDA_CHECK(cudaMemset(kv_v2.get(), 0, cache_bytes));
      auto params = [&](DeviceBuffer& q, DeviceBuffer& cache) {
        return cuda::RopeParams{qkv_d.as<float>(), heads, kv_heads, D, inv_freq_d.as<float>(),
                                static_cast<float>(c.rope_concentration()), q.get(),
                                cuda::KvView{cache.get(), block_size, 1, kv_heads, D, kv}, 0, 0,
                                fp8 ? 0.25f : 1.0f, fp8 ? 3.0f : 1.0f};
      };
      const cuda::RopeParams two = params(q_two, kv_two), one = params(q_one, kv_one), v2 = params(q_v2, kv_v2);
      ASSERT_TRUE(cuda::qkv_rope_fused_supported(Precision::bf16, T, K, one));
      cuda::launch_dense_gemv(nullptr, x_d.get(), T, w_d.get(), N, K, bias_d.as<float>(), qkv_d.as<float>());
      cuda::launch_rope_kv_write(nullptr, Precision::bf16, two, device_step.view, 1);
      cuda::launch_rope_kv_write(nullptr, Precision::bf16, v2, device_step.view, 2);  // version 2: the same bytes
      cuda::launch_qkv_rope_kv_write(nullptr, Precision::bf16, x_d.get(), T, w_d.get(), K, bias_d.as<float>(), one,
                                     device_step.view);
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string what = std::to_string(T) + " tokens in " + std::to_string(cs.starts.size()) +
                               " sequences, " + (fp8 ? "fp8" : "bf16") + " cache";
      EXPECT_EQ(cuda::to_host<uint8_t>(q_one.get(), q_bytes), cuda::to_host<uint8_t>(q_two.get(), q_bytes)) << "q, " << what;
      EXPECT_EQ(cuda::to_host<uint8_t>(kv_one.get(), cache_bytes), cuda::to_host<uint8_t>(kv_two.get(), cache_bytes))
          << "KV cache, " << what;
      EXPECT_EQ(cuda::to_host<uint8_t>(q_v2.get(), q_bytes), cuda::to_host<uint8_t>(q_two.get(), q_bytes))
          << "q, RoPE version 2, " << what;
      EXPECT_EQ(cuda::to_host<uint8_t>(kv_v2.get(), cache_bytes), cuda::to_host<uint8_t>(kv_two.get(), cache_bytes))
          << "KV cache, RoPE version 2, " << what;
    }
  }
  // Outside its shapes (f32, five rows, a K past the GEMV's 4,096, an f32 cache) the predicate says no and the launch
  // fails with an error naming it before anything runs.
  cuda::RopeParams p{nullptr, heads, kv_heads, D, nullptr, 1.0f, nullptr,
                     cuda::KvView{nullptr, block_size, 1, kv_heads, D, cuda::KvDtype::bf16}};
  EXPECT_TRUE(cuda::qkv_rope_fused_supported(Precision::bf16, 4, K, p));
  EXPECT_FALSE(cuda::qkv_rope_fused_supported(Precision::f32, 1, K, p));
  EXPECT_FALSE(cuda::qkv_rope_fused_supported(Precision::bf16, 5, K, p));
  EXPECT_FALSE(cuda::qkv_rope_fused_supported(Precision::bf16, 1, 4104, p));
  EXPECT_THROW(cuda::launch_qkv_rope_kv_write(nullptr, Precision::bf16, nullptr, 5, nullptr, K, nullptr, p, cuda::StepView{}),
               std::exception);
  p.kv.dtype = cuda::KvDtype::f32;
  EXPECT_FALSE(cuda::qkv_rope_fused_supported(Precision::bf16, 1, K, p));
}

TEST(CudaKernelsExact, RouterTopKMatchesCpu) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 7u);
  for (int E : {8, 32, 128}) {
    const int T = 37, k = 4;
    auto logits = random_floats(rng, T * E);
    logits[5] = logits[6];  // a tie: the lower expert id wins
    std::vector<int32_t> experts(T * k);
    std::vector<float> weights(T * k);
    cpu::route_top_k(logits.data(), T, E, k, experts.data(), weights.data());
    DeviceBuffer logits_d = cuda::to_device(logits), experts_d(T * k * 4), weights_d(T * k * 4),
                 counts_d = cuda::to_device(std::vector<int32_t>(E, 0));  // the router adds onto zero counts
    cuda::launch_route_top_k(nullptr, logits_d.as<float>(), T, E, k, experts_d.as<int32_t>(), weights_d.as<float>(),
                             counts_d.as<int32_t>());
    EXPECT_EQ(cuda::to_host<int32_t>(experts_d.get(), T * k), experts) << E << " experts";
    testing::expect_error_within("router weights " + std::to_string(E) + " experts",
                                 relative_error(cuda::to_host<float>(weights_d.get(), T * k), weights), 1e-6);
    std::vector<int32_t> counts(E, 0);
    for (int32_t e : experts) ++counts[e];
    EXPECT_EQ(cuda::to_host<int32_t>(counts_d.get(), E), counts);
  }
}

TEST(CudaKernelsExact, EmbeddingGatherAndArgmaxMatchCpu) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 11u);
  const int V = 50000, H = 96, R = 5;
  auto table = random_floats(rng, static_cast<size_t>(V) * H);
  const std::vector<int32_t> ids = {3, 49999, 0, 3, 1234};
  DeviceBuffer table_d = upload_as(Precision::bf16, table), ids_d = cuda::to_device(ids), x_d(R * H * 4);
  cuda::launch_embedding(nullptr, Precision::bf16, table_d.get(), H, ids_d.as<int32_t>(), R, x_d.as<float>());
  const auto rounded = round_to(Precision::bf16, table);
  std::vector<float> expected;
  for (int32_t id : ids) expected.insert(expected.end(), rounded.begin() + id * H, rounded.begin() + (id + 1) * H);
  EXPECT_EQ(cuda::to_host<float>(x_d.get(), R * H), expected);

  auto logits = random_floats(rng, static_cast<size_t>(R) * V);
  logits[1 * V + 17] = logits[1 * V + 40000] = 100.0f;  // a tie at the top: the lower id wins
  DeviceBuffer logits_d = cuda::to_device(logits), out_d(R * 4);
  cuda::launch_argmax(nullptr, logits_d.as<float>(), R, V, out_d.as<int32_t>());
  const auto out = cuda::to_host<int32_t>(out_d.get(), R);
  for (int r = 0; r < R; ++r)
    EXPECT_EQ(out[r], argmax({logits.data() + static_cast<size_t>(r) * V, static_cast<size_t>(V)})) << "row " << r;
}

}  // namespace
}  // namespace moeserve
