// MoE grouping and the expert GEMMs (reference, decode GEMV x1 / x2, prefill grouped GEMM) against
// cpu::expert_linear and cpu::swiglu, on random MXFP4 experts and skewed random routing (so some experts get
// many rows and span several tiles, others none): the first projection with SwiGLU fused, then the second fed
// with the reference's activations, row by row through the grouping's slot_row map.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "cuda_test_util.h"
#include "runner/cpu/ops.h"
#include "runner/cuda/moe_buffers.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::Precision;

enum class Path { reference, decode_x1, decode_x2, prefill };
const char* path_name(Path p) {
  switch (p) {
    case Path::reference: return "reference";
    case Path::decode_x1: return "decode-x1";
    case Path::decode_x2: return "decode-x2";
    case Path::prefill: return "prefill";
  }
  return "";
}
int rows_per_tile(Path p) { return p == Path::prefill ? cuda::kMoePrefillTileRows : p == Path::decode_x2 ? 16 : 8; }

struct HostExperts {
  std::vector<uint8_t> blocks, scales;
  ExpertMatrix matrix;
  DeviceBuffer blocks_d, scales_d, bias_d;
  HostExperts(std::mt19937& rng, int E, int out, int in, int exponent) {
    const size_t n_blocks = static_cast<size_t>(E) * out * in / 32;
    blocks.resize(n_blocks * 16);
    scales.resize(n_blocks);
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(127 + exponent - static_cast<int>(rng() % 2));
    matrix.format = ExpertFormat::mxfp4;
    matrix.num_experts = E;
    matrix.out_features = out;
    matrix.in_features = in;
    matrix.blocks = blocks.data();
    matrix.scales = scales.data();
    matrix.bias = testing::random_floats(rng, static_cast<size_t>(E) * out, 0.0f, 0.5f);
    blocks_d = cuda::to_device(blocks);
    scales_d = cuda::to_device(scales);
    bias_d = cuda::to_device(matrix.bias);
  }
  cuda::ExpertWeightsView view() const {
    return {blocks_d.as<uint8_t>(), scales_d.as<uint8_t>(), bias_d.as<float>(), matrix.out_features,
            matrix.in_features};
  }
};

int exponent_for(int fan_in, double target) {
  return static_cast<int>(std::lround(std::log2(target / (std::sqrt(static_cast<double>(fan_in)) * 2.93))));
}

struct MoeErrors {
  double mlp1, mlp2;
};

MoeErrors moe_errors(Precision precision, Path path, int E, int H, int I, int T, int k, std::mt19937& rng) {
  ThreadPool pool(0);
  const float alpha = 1.702f, limit = 7.0f;
  HostExperts w1(rng, E, 2 * I, H, exponent_for(H, 5.0)), w2(rng, E, H, I, exponent_for(I, 0.2));
  // Skewed routing: expert e drawn with weight 1 / (e + 1), k distinct per token.
  std::vector<double> popularity(E);
  for (int e = 0; e < E; ++e) popularity[e] = 1.0 / (e + 1);
  std::vector<int32_t> experts;
  std::vector<int32_t> counts(E, 0);
  for (int t = 0; t < T; ++t) {
    std::vector<double> p = popularity;
    for (int j = 0; j < k; ++j) {
      const int e = std::discrete_distribution<int>(p.begin(), p.end())(rng);
      p[e] = 0.0;
      experts.push_back(e);
      ++counts[e];
    }
  }
  const auto x = testing::round_to(precision, testing::random_floats(rng, static_cast<size_t>(T) * H));

  // Reference, expert by expert over its (token, slot) pairs as CpuRunner::moe_layer does.
  auto pairs_of = [&](int e) {
    std::vector<int> pairs;
    for (int i = 0; i < T * k; ++i)
      if (experts[i] == e) pairs.push_back(i);
    return pairs;
  };
  std::vector<float> act_ref(static_cast<size_t>(T) * k * I), y_ref(static_cast<size_t>(T) * k * H);
  const auto act_in = [&] {
    for (int e = 0; e < E; ++e) {
      const std::vector<int> pairs = pairs_of(e);
      if (pairs.empty()) continue;
      const int n = static_cast<int>(pairs.size());
      std::vector<float> gathered(static_cast<size_t>(n) * H), hidden(static_cast<size_t>(n) * 2 * I), act(n * I);
      for (int j = 0; j < n; ++j) std::copy_n(x.data() + (pairs[j] / k) * H, H, gathered.data() + j * H);
      cpu::expert_linear(pool, gathered.data(), n, w1.matrix, e, hidden.data());
      cpu::swiglu(hidden.data(), n, I, alpha, limit, act.data(), nullptr);
      for (int j = 0; j < n; ++j) std::copy_n(act.data() + j * I, I, act_ref.data() + pairs[j] * I);
    }
    // The second projection's input as the device holds it.
    auto rounded = testing::round_to(precision, act_ref);
    for (int e = 0; e < E; ++e) {
      const std::vector<int> pairs = pairs_of(e);
      if (pairs.empty()) continue;
      const int n = static_cast<int>(pairs.size());
      std::vector<float> gathered(static_cast<size_t>(n) * I), out(static_cast<size_t>(n) * H);
      for (int j = 0; j < n; ++j) std::copy_n(rounded.data() + pairs[j] * I, I, gathered.data() + j * I);
      cpu::expert_linear(pool, gathered.data(), n, w2.matrix, e, out.data());
      for (int j = 0; j < n; ++j) std::copy_n(out.data() + j * H, H, y_ref.data() + pairs[j] * H);
    }
    return rounded;
  }();

  const int rows = T * k;
  cuda::MoeBuffers buffers;
  buffers.grow(T, k, E);
  const cuda::MoeRouting routing = buffers.routing();
  DeviceBuffer experts_d = cuda::to_device(experts), x_d = testing::upload_as(precision, x),
               act_d(static_cast<size_t>(rows) * I * cuda::element_bytes(precision)),
               y_d(static_cast<size_t>(rows) * H * 4);
  MOESERVE_CUDA_CHECK(cudaMemcpy(routing.expert_counts, counts.data(), E * 4, cudaMemcpyHostToDevice));
  cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, rows_per_tile(path), routing);

  auto run = [&](const cuda::MoeGemmParams& p) {
    switch (path) {
      case Path::reference: return cuda::launch_moe_reference(nullptr, precision, p);
      case Path::decode_x1: return cuda::launch_moe_decode(nullptr, p, 1);
      case Path::decode_x2: return cuda::launch_moe_decode(nullptr, p, 2);
      case Path::prefill: return cuda::launch_moe_prefill(nullptr, p);
    }
  };
  cuda::MoeGemmParams mlp1;
  mlp1.w = w1.view();
  mlp1.x = x_d.get();
  mlp1.x_row = routing.row_token;
  mlp1.out = act_d.get();
  mlp1.swiglu = true;
  mlp1.swiglu_alpha = alpha;
  mlp1.swiglu_limit = limit;
  mlp1.routing = routing;
  mlp1.rows = rows;
  run(mlp1);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto slot_row = cuda::to_host<int32_t>(routing.slot_row, rows);
  const auto act_grouped = testing::download_as(precision, act_d.get(), static_cast<size_t>(rows) * I);
  std::vector<float> act_out(act_ref.size());
  std::vector<float> act_in_grouped(act_ref.size());
  for (int i = 0; i < rows; ++i) {
    std::copy_n(act_grouped.data() + static_cast<size_t>(slot_row[i]) * I, I, act_out.data() + static_cast<size_t>(i) * I);
    std::copy_n(act_in.data() + static_cast<size_t>(i) * I, I, act_in_grouped.data() + static_cast<size_t>(slot_row[i]) * I);
  }

  DeviceBuffer act_in_d = testing::upload_as(precision, act_in_grouped);
  cuda::MoeGemmParams mlp2 = mlp1;
  mlp2.w = w2.view();
  mlp2.x = act_in_d.get();
  mlp2.x_row = nullptr;
  mlp2.out = y_d.get();
  mlp2.swiglu = false;
  run(mlp2);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto y_grouped = cuda::to_host<float>(y_d.get(), static_cast<size_t>(rows) * H);
  std::vector<float> y_out(y_ref.size());
  for (int i = 0; i < rows; ++i)
    std::copy_n(y_grouped.data() + static_cast<size_t>(slot_row[i]) * H, H, y_out.data() + static_cast<size_t>(i) * H);
  return {testing::relative_error(act_out, act_ref), testing::relative_error(y_out, y_ref)};
}

struct Shape {
  const char* name;
  int E, H, I, T, k;
};

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 5u};

  void check(Precision precision, Path path, const Shape& s) {
    const MoeErrors errors = moe_errors(precision, path, s.E, s.H, s.I, s.T, s.k, rng_);
    // bf16: inputs rounded to bf16 (weights are exact); fp32: summation order only.
    const double bound = precision == Precision::bf16 ? 1e-2 : 1e-5;
    const std::string what = std::string("moe ") + path_name(path) + " " + testing::precision_name(precision) + " " + s.name;
    testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, bound);
    testing::expect_error_within(what + " mlp2", errors.mlp2, bound);
  }
};

const Shape kRealWidth{"E32 H2880 I2880 T3", 32, 2880, 2880, 3, 4};
const Shape kMedium{"E8 H576 I320 T70", 8, 576, 320, 70, 4};
const Shape kOddTail{"E4 H96 I160 T9", 4, 96, 160, 9, 2};  // K not a multiple of 64 or 128, N not of 128
const Shape kManyPairs{"E8 H96 I160 T300", 8, 96, 160, 300, 4};  // 1,200 pairs: scan and placement launched apart

TEST_F(CudaMoe, ReferenceKernelMatchesCpu) {
  for (Precision precision : {Precision::f32, Precision::bf16})
    for (const Shape& s : {kMedium, kOddTail, kManyPairs}) check(precision, Path::reference, s);
}

TEST_F(CudaMoe, DecodeKernelMatchesCpu) {
  for (Path path : {Path::decode_x1, Path::decode_x2})
    for (const Shape& s : {kRealWidth, kMedium, kOddTail}) check(Precision::bf16, path, s);
}

TEST_F(CudaMoe, PrefillKernelMatchesCpu) {
  for (const Shape& s : {kRealWidth, kMedium, kOddTail, kManyPairs}) check(Precision::bf16, Path::prefill, s);
}

}  // namespace
}  // namespace moeserve
