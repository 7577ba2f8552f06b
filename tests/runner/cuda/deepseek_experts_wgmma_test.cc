// Version 2 of the routed-expert kernel (deepseek_experts_wgmma.cu: act_quant, then wgmma e4m3 with fp32 promotion
// every 128-column block of K, SwiGLU fused) against the CPU op on fresh random inputs: at DeepSeek-V3's widths
// (hidden 7,168, intermediate 2,048), and at the tiles' edges: rows per expert 1, 63, 64, 65, 127, 128, 129 and 300
// around the 128-row tile, an expert with none, top-2 (the gate/up activations gathered through row_token), K and N
// past whole tiles (K a multiple of 16, the kernel's 16-byte copies).
//
// The kernel quantises its inputs as DeepSeek's act_quant does (e4m3, one scale per token per 128 columns), so the CPU
// op (cpu::linear over each expert's deepseek_v3::Linear, then cpu::silu_mul) runs on the same quantised activations,
// dequantised exactly (quantize_activations_fp8, which the device quantiser matches byte for byte:
// deepseek_ops_test's QuantizerMatchesCpuModel). Bounds, per grouped row on ||gpu - cpu|| / ||cpu||:
// - down (fp32 out): each product of two e4m3 values is exact in fp32 on both sides. The CPU sums them in fp32; the
//   tensor cores sum a 128-column block's products with fewer bits (about 14: DeepSeek-V3's report, section 3.3.2)
//   before the kernel scales the block's sum and adds it into fp32, so the error is the tensor cores' rounding
//   within one block, not growing with K. cuBLASLt's FP8 path promotes the same way and is held to 2e-3
//   (deepseek_ops_test's Fp8BlockLinearMatchesCpu; measured 1.4e-4 at V3 widths): 2e-3.
// - gate/up + SwiGLU (bf16 out): gate and up each within those 2e-3. silu(g) u moves by u's relative error plus g's
//   times d ln silu(g) / d ln g = 1 + g (1 - sigmoid(g)), which is at most 1.28 where g > 0 (where g < 0, |silu(g)|
//   < 0.28 |g| is small beside the row's largest values): (1 + 1.28) x 2e-3 = 4.6e-3. Rounding the output to bf16
//   adds 2^-9 = 2e-3 of each value: 7e-3.
// - down against its activations as given (not quantised: what the f32 CPU runner computes): act_quant's rounding,
//   each value within 2^-4 of itself, moves a row by at most 2^-4 in expectation (deepseek_ops_test's derivation):
//   6.25e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "random_fp8_weight.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/moe_buffers.h"
#include "runner_compare.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::Precision;

class DeepseekExpertsWgmma : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  // Rows per expert `counts`, k experts a token, gate/up [I, H] and down [H, I] per expert.
  void check(const std::vector<int>& counts, int k, int64_t H, int64_t I);
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 1721u};
};

// x as the kernel's products see it: act_quant's e4m3 values times their scales.
std::vector<float> act_quant_rounded(const std::vector<float>& x, int64_t rows, int64_t K) {
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(cuda::fp8_activation_scale_count(rows, K)), out(x.size());
  cuda::quantize_activations_fp8(x.data(), rows, K, q.data(), scales.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < K; ++c)
      out[r * K + c] = fp8_e4m3_to_float(q[r * K + c]) *
                       scales[cuda::fp8_activation_scale_index(r, c / cuda::kFp8Block, rows)];
  return out;
}

// Rows `members` of x ([*, K]) stacked.
std::vector<float> gather_rows(const std::vector<float>& x, const std::vector<int>& members, int64_t K) {
  std::vector<float> out;
  out.reserve(members.size() * K);
  for (int m : members) out.insert(out.end(), x.begin() + m * K, x.begin() + (m + 1) * K);
  return out;
}

void DeepseekExpertsWgmma::check(const std::vector<int>& counts, int k, int64_t H, int64_t I) {
  const int E = static_cast<int>(counts.size());
  const int rows = std::accumulate(counts.begin(), counts.end(), 0), T = rows / k;
  ASSERT_EQ(T * k, rows);
  // The pairs sorted by expert; token t takes pairs t, t + T, ...: distinct experts while no count exceeds T.
  std::vector<int32_t> sorted, experts(rows);
  for (int e = 0; e < E; ++e) {
    ASSERT_LE(counts[e], T);
    sorted.insert(sorted.end(), counts[e], e);
  }
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) experts[t * k + j] = sorted[t + j * T];
  cuda::MoeBuffers buffers;
  buffers.grow(T, k, E);
  const cuda::MoeRouting routing = buffers.routing();
  DeviceBuffer experts_d = cuda::to_device(experts);
  const std::vector<int32_t> counts32(counts.begin(), counts.end());
  MOESERVE_CUDA_CHECK(cudaMemcpy(routing.expert_counts, counts32.data(), E * 4, cudaMemcpyHostToDevice));
  cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, cuda::kDeepseekExpertTileRows, routing);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> slot_row = cuda::to_host<int32_t>(routing.slot_row, rows);

  const testing::RandomFp8Experts gate(rng_, E, I, H), up(rng_, E, I, H), down(rng_, E, H, I);
  // Each token's row times 2^-3 .. 2^3, so that a scale read for another token or block shows.
  std::vector<float> x = testing::random_floats(rng_, static_cast<size_t>(T) * H);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  for (int t = 0; t < T; ++t) {
    const float factor = std::exp2(exponent(rng_));
    for (int64_t c = 0; c < H; ++c) x[t * H + c] *= factor;
  }
  x = testing::round_to(Precision::bf16, x);

  // Version 2 over the grouping: x_in (bf16, x_rows rows, gathered through x_row when set) into out, through its
  // own act_quant scratch.
  auto project = [&](const cuda::DeviceMatrix& w, const cuda::DeviceMatrix& up_w, const DeviceBuffer& x_in,
                     int x_rows, const int32_t* x_row, Precision out_type, DeviceBuffer& out) {
    DeviceBuffer values(x_rows * w.cols), scales(cuda::fp8_activation_scale_count(x_rows, w.cols) * 4);
    cuda::DeepseekExpertParams p;
    p.w = w;
    p.up = up_w;
    p.x = x_in.get();
    p.x_type = Precision::bf16;
    p.x_row = x_row;
    p.out = out.get();
    p.out_type = out_type;
    p.rows = rows;
    p.routing = routing;
    p.x_fp8 = {values.as<uint8_t>(), scales.as<float>()};
    p.x_rows = x_rows;
    cuda::launch_deepseek_experts(nullptr, p, cuda::DeepseekExpertsVersion::v2);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  };
  DeviceBuffer x_d = testing::upload_as(Precision::bf16, x), act_d(rows * I * 2), y_d(rows * H * 4);
  project(gate.device, up.device, x_d, T, routing.row_token, Precision::bf16, act_d);
  // Down, on the device's own intermediates (so each projection is checked alone).
  project(down.device, {}, act_d, rows, nullptr, Precision::f32, y_d);
  const std::vector<float> act = testing::download_as(Precision::bf16, act_d.get(), rows * I);
  const std::vector<float> y = cuda::to_host<float>(y_d.get(), rows * H);

  // The CPU, expert by expert, its rows in grouped order: act_want and y_want on the quantised activations, y_plain
  // on the device's intermediates as they are.
  ThreadPool pool(0);
  const std::vector<float> x_rounded = act_quant_rounded(x, T, H), act_rounded = act_quant_rounded(act, rows, I);
  std::vector<float> act_want(act.size()), y_want(y.size()), y_plain(y.size());
  for (int e = 0; e < E; ++e) {
    std::vector<int> tokens, grouped;
    for (int pair = 0; pair < rows; ++pair)
      if (experts[pair] == e) tokens.push_back(pair / k), grouped.push_back(slot_row[pair]);
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) continue;
    std::vector<float> g(n * I), u(n * I), o(n * H), o_plain(n * H);
    const std::vector<float> xs = gather_rows(x_rounded, tokens, H);
    cpu::linear(pool, xs.data(), n, gate.weights[e].linear, g.data());
    cpu::linear(pool, xs.data(), n, up.weights[e].linear, u.data());
    cpu::silu_mul(g.data(), u.data(), n * I);
    cpu::linear(pool, gather_rows(act_rounded, grouped, I).data(), n, down.weights[e].linear, o.data());
    cpu::linear(pool, gather_rows(act, grouped, I).data(), n, down.weights[e].linear, o_plain.data());
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(g.begin() + i * I, I, act_want.begin() + grouped[i] * I);
      std::copy_n(o.begin() + i * H, H, y_want.begin() + grouped[i] * H);
      std::copy_n(o_plain.begin() + i * H, H, y_plain.begin() + grouped[i] * H);
    }
  }
  const std::string shape = std::to_string(H) + "/" + std::to_string(I);
  testing::expect_error_within("wgmma experts gate/up + SwiGLU bf16 " + shape,
                               testing::row_errors(act, act_want, static_cast<int>(I)).worst, 7e-3);
  testing::expect_error_within("wgmma experts down " + shape, testing::row_errors(y, y_want, static_cast<int>(H)).worst,
                               2e-3);
  testing::expect_error_within("wgmma experts down vs unquantised x " + shape,
                               testing::row_errors(y, y_plain, static_cast<int>(H)).worst, 6.25e-2);
}

// Rows per expert around the 128-row tile and the 64-row warpgroup halves, an expert with none, top-2 (T = 439).
// Hidden 400: gate/up's last K block of 16 columns, down's last weight tile of 16 rows past 3 x 128. Intermediate 208:
// gate/up's last SwiGLU tile of 16 of its 64 gate and 64 up rows, down's last K block of 80 columns.
TEST_F(DeepseekExpertsWgmma, MatchesCpuAtTileEdges) { check({1, 63, 64, 65, 127, 128, 129, 300, 0, 1}, 2, 400, 208); }

// DeepSeek-V3's widths: an expert of 129 rows (a full tile and one row), one of 64 (one warpgroup's half), one empty.
TEST_F(DeepseekExpertsWgmma, MatchesCpuAtV3Widths) { check({129, 0, 64}, 1, 7168, 2048); }

}  // namespace
}  // namespace moeserve
