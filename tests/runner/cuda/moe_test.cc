// MoE grouping and every expert GEMM path (moe_plan.h: the reference, the GEMV x1 / x2, the wgmma decode kernel
// at n16 / n32 / n64, the mma.sync and wgmma prefill kernels) against cpu::expert_linear and cpu::swiglu, on
// fresh random MXFP4 experts and activations: the first projection with SwiGLU fused, then the second fed with the
// reference's activations, row by row through the grouping's slot_row map. Routings: skewed random (some experts
// span several tiles, others get none), and chosen expert row counts that hit each path's tile edges (0, 1,
// tile - 1, tile, tile + 1, ... for tiles of 8 to 128), at odd widths and (CudaFullWidthMoe) at the gpt-oss-20b and
// -120b expert shapes. The fused router + grouping of decode steps (launch_route_top_k_and_group) against the two
// launches it replaces, field by field.
// Bounds on ||out - ref|| / ||ref||: the first projection's output is rounded to bf16 (2^-9 at most per value,
// ~1.1e-3 rms), bound 4e-3; the second reads the same bf16 inputs as the reference and exact weights, so only
// fp32 summation order differs, bound 1e-4; fp32 precision (reference path) 1e-5.
// FP8 activations (the decode_mma paths with x_fp8): the device quantises each projection's input rows
// (launch_quantize_rows_e4m3, checked byte for byte against cuda_fp8.h's host conversion of the same arithmetic),
// and the reference computes on those quantised values (e4m3 value times the row's scale): the same bounds, since
// the e4m3 products are exact and only fp32 rounding differs. What FP8 costs, the error against the unquantised
// reference, is printed and bounded loosely (0.1).
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "runner/cpu/ops.h"
#include "runner/cuda/moe_buffers.h"
#include "runner/cuda/moe_layout.h"
#include "util/error.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::MoePath;
using cuda::Precision;

constexpr float kAlpha = 1.702f, kLimit = 7.0f;

// Random MXFP4 experts, made on the device (launch_fill_bytes / _scales, a fresh key per test) and copied back
// for the CPU reference.
// span > 0: each block's scale drawn from exponent - span .. exponent instead (rows of wide scale span, which the
// FP8 grouped GEMM's e4m3 conversion handles exactly up to a span of 14 and rounds beyond).
struct HostExperts {
  std::vector<uint8_t> blocks, scales;
  ExpertMatrix matrix;
  DeviceBuffer blocks_d, scales_d, bias_d, row_max_d, wide_d;
  int wide_rows = 0;  // rows whose scales span more than 14, counted by the device
  HostExperts(std::mt19937& rng, int E, int out, int in, int exponent, int span = 0) {
    // Made in the checkpoint's order, then tiled for the kernels (moe_layout.h) as the weight upload does.
    const size_t n_blocks = static_cast<size_t>(E) * out * in / 32;
    DeviceBuffer checkpoint_blocks(n_blocks * 16), checkpoint_scales(n_blocks);
    cuda::launch_fill_bytes(nullptr, checkpoint_blocks.as<uint8_t>(), static_cast<int64_t>(n_blocks) * 16, rng());
    cuda::launch_fill_scales(nullptr, checkpoint_scales.as<uint8_t>(), static_cast<int64_t>(n_blocks), rng(), exponent);
    blocks = cuda::to_host<uint8_t>(checkpoint_blocks.get(), n_blocks * 16);
    // The device reads its random bytes as packed words (moe_layout.h); the CPU reference gets the checkpoint order.
    for (size_t i = 0; i < blocks.size(); i += 4) {
      uint32_t word;
      std::memcpy(&word, blocks.data() + i, 4);
      word = cuda::mxfp4_unpack_word(word);
      std::memcpy(blocks.data() + i, &word, 4);
    }
    scales = cuda::to_host<uint8_t>(checkpoint_scales.get(), n_blocks);
    if (span > 0) {
      for (uint8_t& scale : scales) scale = static_cast<uint8_t>(127 + exponent - static_cast<int>(rng() % (span + 1)));
      MOESERVE_CUDA_CHECK(cudaMemcpy(checkpoint_scales.get(), scales.data(), n_blocks, cudaMemcpyHostToDevice));
    }
    const int64_t tiled = cuda::mxfp4_tiled_elements(E, out, in / 32);
    blocks_d = DeviceBuffer(tiled * 16);
    scales_d = DeviceBuffer(tiled);
    cuda::launch_mxfp4_tile(nullptr, blocks_d.as<uint8_t>(), scales_d.as<uint8_t>(), checkpoint_blocks.as<uint8_t>(),
                            checkpoint_scales.as<uint8_t>(), E, out, in / 32);
    row_max_d = DeviceBuffer(static_cast<size_t>(E) * out);
    wide_d = DeviceBuffer(sizeof(int32_t));
    cuda::launch_mxfp4_row_scale_max(nullptr, scales_d.as<uint8_t>(), E, out, in / 32, row_max_d.as<uint8_t>(),
                                     wide_d.as<int32_t>());
    wide_rows = cuda::to_host<int32_t>(wide_d.get(), 1)[0];
    matrix.format = ExpertFormat::mxfp4;
    matrix.num_experts = E;
    matrix.out_features = out;
    matrix.in_features = in;
    matrix.blocks = blocks.data();
    matrix.scales = scales.data();
    matrix.bias = testing::random_floats(rng, static_cast<size_t>(E) * out, 0.0f, 0.5f);
    bias_d = cuda::to_device(matrix.bias);
  }
  cuda::ExpertWeightsView view() const {
    return {blocks_d.as<uint8_t>(), scales_d.as<uint8_t>(), bias_d.as<float>(), matrix.out_features,
            matrix.in_features, row_max_d.as<uint8_t>()};
  }
};

int exponent_for(int fan_in, double target) {
  return static_cast<int>(std::lround(std::log2(target / (std::sqrt(static_cast<double>(fan_in)) * 2.93))));
}

// The experts of T tokens, k distinct each: [T * k], token-major.
struct Routing {
  int T = 0, k = 0;
  std::vector<int32_t> experts;
};

// Skewed: expert e drawn with weight 1 / (e + 1).
Routing skewed_routing(std::mt19937& rng, int E, int T, int k) {
  std::vector<double> popularity(E);
  for (int e = 0; e < E; ++e) popularity[e] = 1.0 / (e + 1);
  Routing r{T, k, {}};
  for (int t = 0; t < T; ++t) {
    std::vector<double> p = popularity;
    for (int j = 0; j < k; ++j) {
      const int e = std::discrete_distribution<int>(p.begin(), p.end())(rng);
      p[e] = 0.0;
      r.experts.push_back(e);
    }
  }
  return r;
}

// Exactly counts[e] rows for expert e (the last expert takes up to k - 1 more so that the pairs fill whole
// tokens): the pairs, sorted by expert, go to tokens round-robin, so an expert's run lands on distinct tokens
// while no count exceeds T. Tokens are then shuffled.
Routing counted_routing(std::mt19937& rng, std::vector<int> counts, int k) {
  int total = std::accumulate(counts.begin(), counts.end(), 0);
  counts.back() += (k - total % k) % k;
  total = std::accumulate(counts.begin(), counts.end(), 0);
  Routing r{total / k, k, std::vector<int32_t>(total)};
  MOESERVE_CHECK(*std::max_element(counts.begin(), counts.end()) <= r.T, "counted_routing: a count exceeds T");
  std::vector<int> order(r.T);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  int i = 0;
  for (int e = 0; e < static_cast<int>(counts.size()); ++e)
    for (int c = 0; c < counts[e]; ++c, ++i) r.experts[order[i % r.T] * k + i / r.T] = e;
  return r;
}

struct MoeErrors {
  double mlp1, mlp2;
  double mlp1_fp8_cost = 0, mlp2_fp8_cost = 0;  // FP8: against the unquantised inputs' reference
};

// One row's dynamic FP8 quantisation as launch_quantize_rows_e4m3 does it (scale amax / 448, e4m3 of x * (448 /
// amax) rounded to nearest, saturated), into bytes and the scale.
float quantize_row_e4m3(const float* x, size_t cols, uint8_t* q) {
  float amax = 0.0f;
  for (size_t i = 0; i < cols; ++i) amax = std::max(amax, std::abs(x[i]));
  const float inverse = amax > 0.0f ? 448.0f / amax : 1.0f;
  for (size_t i = 0; i < cols; ++i) q[i] = __nv_cvt_float_to_fp8(x[i] * inverse, __NV_SATFINITE, __NV_E4M3);
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}
float e4m3_to_float(uint8_t q) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3))); }

// Rows of `cols` values as FP8 activations hold them: each value's e4m3 times its row's scale.
std::vector<float> fp8_round_trip(const std::vector<float>& x, size_t cols) {
  std::vector<float> out(x.size());
  std::vector<uint8_t> q(cols);
  for (size_t r = 0; r < x.size() / cols; ++r) {
    const float scale = quantize_row_e4m3(x.data() + r * cols, cols, q.data());
    for (size_t i = 0; i < cols; ++i) out[r * cols + i] = e4m3_to_float(q[i]) * scale;
  }
  return out;
}

struct Shape {
  const char* name;
  int E, H, I;
};

// One routing on fresh experts and activations, with its CPU reference; run() checks a path against it.
class MoeCase {
 public:
  // fp8: the reference on FP8-quantised inputs (each projection's, as the device quantises them), and the
  // unquantised one beside it for what the quantisation costs.
  MoeCase(Precision precision, const Shape& s, Routing routing, std::mt19937& rng, bool fp8 = false, int span = 0)
      : precision_(precision),
        shape_(s),
        routing_(std::move(routing)),
        fp8_(fp8),
        w1_(rng, s.E, 2 * s.I, s.H, exponent_for(s.H, 5.0), span),
        w2_(rng, s.E, s.H, s.I, exponent_for(s.I, 0.2), span) {
    const int H = s.H, I = s.I, T = routing_.T;
    x_ = testing::round_to(precision, testing::random_floats(rng, static_cast<size_t>(T) * H));
    act_ref_ = first_projection(fp8 ? fp8_round_trip(x_, H) : x_);
    // The second projection's input as the device holds it (the bf16 rows the first wrote).
    act_in_ = testing::round_to(precision, act_ref_);
    y_ref_ = second_projection(fp8 ? fp8_round_trip(act_in_, I) : act_in_);
    if (fp8) {
      act_exact_ = first_projection(x_);
      y_exact_ = second_projection(act_in_);
    }
    x_d_ = testing::upload_as(precision, x_);
  }

  // hot: prefill_wgmma_hot's slots and min_rows; its scratch is made here, filled with NaN (0xff bytes: bf16 and e4m3
  // NaN) so that a tile the GEMM reads but the conversion did not write shows in the error.
  // out_bf16: the second projection writes bf16 rows (MoeGemmParams::out_bf16).
  MoeErrors run(MoePath path, const cuda::MoeMixedBounds& mixed = {}, const cuda::MoeGemmParams::Hot& hot = {},
                bool out_bf16 = false) const {
    const int E = shape_.E, H = shape_.H, I = shape_.I, T = routing_.T, k = routing_.k, rows = T * k;
    std::vector<int32_t> counts(E, 0);
    for (int32_t e : routing_.experts) ++counts[e];
    cuda::MoeBuffers buffers;
    buffers.grow(T, k, E);
    cuda::MoeRouting routing = buffers.routing();
    routing.mixed = mixed;
    DeviceBuffer experts_d = cuda::to_device(routing_.experts),
                 act_d(static_cast<size_t>(rows) * I * cuda::element_bytes(precision_)),
                 y_d(static_cast<size_t>(rows) * H * 4);
    MOESERVE_CUDA_CHECK(cudaMemcpy(routing.expert_counts, counts.data(), E * 4, cudaMemcpyHostToDevice));
    cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, cuda::moe_rows_per_tile(path), routing);

    cuda::MoeGemmParams mlp1;
    mlp1.w = w1_.view();
    mlp1.x = x_d_.get();
    mlp1.x_row = routing.row_token;
    mlp1.out = act_d.get();
    mlp1.swiglu = true;
    mlp1.swiglu_alpha = kAlpha;
    mlp1.swiglu_limit = kLimit;
    mlp1.routing = routing;
    mlp1.rows = rows;
    DeviceBuffer hot_d(path != MoePath::prefill_wgmma_hot
                           ? 0
                           : static_cast<size_t>(std::max(cuda::moe_hot_bytes(std::max(hot.slots, 1), 2 * I, H, fp8_),
                                                          cuda::moe_hot_bytes(std::max(hot.slots, 1), H, I, fp8_))));
    if (hot_d.bytes() > 0) MOESERVE_CUDA_CHECK(cudaMemset(hot_d.get(), 0xff, hot_d.bytes()));
    mlp1.hot = hot;
    mlp1.hot.tiles = hot_d.as<uint8_t>();
    DeviceBuffer x_q(fp8_ ? static_cast<size_t>(T) * H : 0), x_scale(fp8_ ? T * 4 : 0),
        act_q(fp8_ ? static_cast<size_t>(rows) * I : 0), act_scale(fp8_ ? rows * 4 : 0);
    if (fp8_) {
      cuda::launch_quantize_rows_e4m3(nullptr, x_d_.get(), T, H, x_q.as<uint8_t>(), x_scale.as<float>());
      mlp1.x_fp8 = x_q.as<uint8_t>();
      mlp1.x_scale = x_scale.as<float>();
    }
    cuda::launch_moe_path(nullptr, path, precision_, mlp1);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto slot_row = cuda::to_host<int32_t>(routing.slot_row, rows);
    const auto act_grouped = testing::download_as(precision_, act_d.get(), static_cast<size_t>(rows) * I);
    std::vector<float> act_out(act_ref_.size()), act_in_grouped(act_ref_.size());
    for (int i = 0; i < rows; ++i) {
      std::copy_n(act_grouped.data() + static_cast<size_t>(slot_row[i]) * I, I, act_out.data() + static_cast<size_t>(i) * I);
      std::copy_n(act_in_.data() + static_cast<size_t>(i) * I, I, act_in_grouped.data() + static_cast<size_t>(slot_row[i]) * I);
    }

    DeviceBuffer act_in_d = testing::upload_as(precision_, act_in_grouped);
    cuda::MoeGemmParams mlp2 = mlp1;
    mlp2.w = w2_.view();
    mlp2.x = act_in_d.get();
    mlp2.x_row = nullptr;
    mlp2.out = y_d.get();
    mlp2.out_bf16 = out_bf16;
    mlp2.swiglu = false;
    if (fp8_) {
      cuda::launch_quantize_rows_e4m3(nullptr, act_in_d.get(), rows, I, act_q.as<uint8_t>(), act_scale.as<float>());
      mlp2.x_fp8 = act_q.as<uint8_t>();
      mlp2.x_scale = act_scale.as<float>();
    }
    cuda::launch_moe_path(nullptr, path, precision_, mlp2);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto y_grouped = out_bf16 ? testing::download_as(Precision::bf16, y_d.get(), static_cast<size_t>(rows) * H)
                                    : cuda::to_host<float>(y_d.get(), static_cast<size_t>(rows) * H);
    std::vector<float> y_out(y_ref_.size());
    for (int i = 0; i < rows; ++i)
      std::copy_n(y_grouped.data() + static_cast<size_t>(slot_row[i]) * H, H, y_out.data() + static_cast<size_t>(i) * H);
    MoeErrors errors{testing::relative_error(act_out, act_ref_), testing::relative_error(y_out, y_ref_)};
    if (fp8_) {
      errors.mlp1_fp8_cost = testing::relative_error(act_out, act_exact_);
      errors.mlp2_fp8_cost = testing::relative_error(y_out, y_exact_);
    }
    return errors;
  }

  const Shape& shape() const { return shape_; }
  int wide_rows() const { return w1_.wide_rows + w2_.wide_rows; }
  // The same count on the host: rows of either projection whose block scales span more than 14.
  int host_wide_rows() const {
    int wide = 0;
    for (const HostExperts* w : {&w1_, &w2_}) {
      const int64_t rows = static_cast<int64_t>(w->matrix.num_experts) * w->matrix.out_features;
      const int64_t per_row = w->matrix.in_features / 32;
      for (int64_t r = 0; r < rows; ++r) {
        const auto [lo, hi] = std::minmax_element(w->scales.begin() + r * per_row, w->scales.begin() + (r + 1) * per_row);
        wide += *hi - *lo > cuda::kMxfp4E4m3ExactSpan;
      }
    }
    return wide;
  }

 private:
  // The reference, expert by expert over its (token, slot) pairs as CpuRunner::moe_layer does: SwiGLU(x W1^T) for
  // x [T, H], then the second projection of [T * k, I] rows in (token, slot) order.
  std::vector<float> first_projection(const std::vector<float>& x) const {
    const int H = shape_.H, I = shape_.I, T = routing_.T, k = routing_.k;
    ThreadPool pool(0);
    std::vector<float> act_ref(static_cast<size_t>(T) * k * I);
    for (int e = 0; e < shape_.E; ++e) {
      const std::vector<int> pairs = pairs_of(e);
      if (pairs.empty()) continue;
      const int n = static_cast<int>(pairs.size());
      std::vector<float> gathered(static_cast<size_t>(n) * H), hidden(static_cast<size_t>(n) * 2 * I), act(n * I);
      for (int j = 0; j < n; ++j) std::copy_n(x.data() + (pairs[j] / k) * H, H, gathered.data() + j * H);
      cpu::expert_linear(pool, gathered.data(), n, w1_.matrix, e, hidden.data());
      cpu::swiglu(hidden.data(), n, I, kAlpha, kLimit, act.data(), nullptr);
      for (int j = 0; j < n; ++j) std::copy_n(act.data() + j * I, I, act_ref.data() + pairs[j] * I);
    }
    return act_ref;
  }
  std::vector<float> second_projection(const std::vector<float>& act_in) const {
    const int H = shape_.H, I = shape_.I, T = routing_.T, k = routing_.k;
    ThreadPool pool(0);
    std::vector<float> y_ref(static_cast<size_t>(T) * k * H);
    for (int e = 0; e < shape_.E; ++e) {
      const std::vector<int> pairs = pairs_of(e);
      if (pairs.empty()) continue;
      const int n = static_cast<int>(pairs.size());
      std::vector<float> gathered(static_cast<size_t>(n) * I), out(static_cast<size_t>(n) * H);
      for (int j = 0; j < n; ++j) std::copy_n(act_in.data() + pairs[j] * I, I, gathered.data() + j * I);
      cpu::expert_linear(pool, gathered.data(), n, w2_.matrix, e, out.data());
      for (int j = 0; j < n; ++j) std::copy_n(out.data() + j * H, H, y_ref.data() + pairs[j] * H);
    }
    return y_ref;
  }

  std::vector<int> pairs_of(int e) const {
    std::vector<int> pairs;
    for (int i = 0; i < routing_.T * routing_.k; ++i)
      if (routing_.experts[i] == e) pairs.push_back(i);
    return pairs;
  }

  Precision precision_;
  Shape shape_;
  Routing routing_;
  bool fp8_;
  HostExperts w1_, w2_;
  std::vector<float> x_, act_ref_, act_in_, y_ref_, act_exact_, y_exact_;
  DeviceBuffer x_d_;
};

// Every bf16 path: the tensor-core ones and the reference kernel in bf16.
const std::vector<MoePath> kBf16Paths(std::begin(cuda::kMoePaths), std::end(cuda::kMoePaths));

// Expert row counts at the edges of every tile size in use (8, 16, 32, 64, 128, 256): 0, 1, tile - 1, tile, tile + 1.
std::vector<int> edge_counts(int E) {
  std::vector<int> counts = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 0, 2, 255, 256, 257};
  counts.resize(E, 0);
  return counts;
}

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 5u};

  // Each path in `paths` against one case's reference.
  void check(Precision precision, const std::vector<MoePath>& paths, const Shape& s, Routing routing,
             const std::string& label) {
    const MoeCase c(precision, s, std::move(routing), rng_);
    const bool f32 = precision == Precision::f32;
    for (MoePath path : paths) {
      const MoeErrors errors = c.run(path);
      const std::string what = std::string("moe ") + cuda::moe_path_name(path) + " " +
                               testing::precision_name(precision) + " " + s.name + " " + label;
      testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, f32 ? 1e-5 : 4e-3);
      testing::expect_error_within(what + " mlp2", errors.mlp2, f32 ? 1e-5 : 1e-4);
    }
  }
  void check_skewed(Precision precision, const std::vector<MoePath>& paths, const Shape& s, int T, int k) {
    check(precision, paths, s, skewed_routing(rng_, s.E, T, k), "skewed T" + std::to_string(T));
  }
};

const Shape k120b{"E128 H2880 I2880", 128, 2880, 2880};
const Shape k20b{"E32 H2880 I2880", 32, 2880, 2880};
const Shape kMedium{"E8 H576 I320", 8, 576, 320};
const Shape kOddTail{"E4 H96 I160", 4, 96, 160};  // K not a multiple of 64, N not of 128, 192 or 512
const Shape kManyPairs{"E8 H96 I160", 8, 96, 160};

TEST_F(CudaMoe, ReferenceKernelMatchesCpu) {
  for (Precision precision : {Precision::f32, Precision::bf16}) {
    check_skewed(precision, {MoePath::reference}, kMedium, 70, 4);
    check_skewed(precision, {MoePath::reference}, kOddTail, 9, 2);
    check_skewed(precision, {MoePath::reference}, kManyPairs, 300, 4);  // 1,200 pairs: scan and placement apart
  }
}

TEST_F(CudaMoe, EveryPathMatchesCpuOnSkewedRouting) {
  check_skewed(Precision::bf16, kBf16Paths, kMedium, 70, 4);
  check_skewed(Precision::bf16, kBf16Paths, kOddTail, 9, 2);
  check_skewed(Precision::bf16, kBf16Paths, kManyPairs, 300, 4);
  check_skewed(Precision::bf16, kBf16Paths, k20b, 3, 4);
}

TEST_F(CudaMoe, EveryPathMatchesCpuAtTileEdges) {
  // Odd widths: tails of K (96, 160) and of the weight tiles; top-2 so that T >= 129.
  check(Precision::bf16, kBf16Paths, kManyPairs, counted_routing(rng_, {1, 8, 16, 17, 33, 65, 129, 0}, 2), "edge counts");
}

// The 256-row tiles' edges (prefill_wgmma_m256, and the other grouped GEMMs beside it): counts about 256 and 512,
// one row, and an empty expert; top-4 over 513 tokens (2,052 rows). (prefill_wgmma_deep's raw ring wraps in the
// k20b shape of EveryPathMatchesCpuOnSkewedRouting: 45 64-k steps an item.)
TEST_F(CudaMoe, EveryPathMatchesCpuAtWideTileEdges) {
  check(Precision::bf16,
        {MoePath::prefill_wgmma, MoePath::prefill_wgmma_m256, MoePath::prefill_wgmma_deep, MoePath::prefill_wgmma_split,
         MoePath::prefill_mma},
        kManyPairs,
        counted_routing(rng_, {255, 256, 257, 511, 512, 1, 0, 260}, 4), "wide edge counts");
}

// decode_mma_mixed with bounds that put the edge counts in each width: all 32-row tiles (but 1-row experts), mostly
// 8-row ones (several a expert), and the three mixed.
TEST_F(CudaMoe, MixedTilesMatchCpuAtEveryBound) {
  const MoeCase c(Precision::bf16, kManyPairs, counted_routing(rng_, {1, 8, 16, 17, 33, 65, 129, 0}, 2), rng_);
  for (const cuda::MoeMixedBounds bounds : {cuda::MoeMixedBounds{1, 1}, cuda::MoeMixedBounds{64, 128},
                                            cuda::MoeMixedBounds{8, 16}, cuda::MoeMixedBounds{9, 40}}) {
    const MoeErrors errors = c.run(MoePath::decode_mma_mixed, bounds);
    const std::string what = "moe decode-mma-mixed " + std::to_string(bounds.n8_max) + ":" +
                             std::to_string(bounds.n16_max) + " edge counts";
    testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, 4e-3);
    testing::expect_error_within(what + " mlp2", errors.mlp2, 1e-4);
  }
}

// prefill_wgmma_split at bounds that send no expert's last rows to 32-row tiles (0), up to 32 or 64 of them, and
// every remainder (127), on counts at the edges of both widths (a cold expert of 1-127 rows, whole tiles and one
// more row, 128 + 64 and + 65), top-2; the two launches write disjoint rows of one output.
TEST_F(CudaMoe, SplitTilesMatchCpuAtEveryBound) {
  const MoeCase c(Precision::bf16, kManyPairs, counted_routing(rng_, {1, 33, 64, 65, 129, 192, 193, 0}, 2), rng_);
  for (int split_max : {0, 32, 64, 127}) {
    cuda::MoeMixedBounds bounds;
    bounds.split_max = split_max;
    const MoeErrors errors = c.run(MoePath::prefill_wgmma_split, bounds);
    const std::string what = "moe prefill-wgmma-split " + std::to_string(split_max) + " edge counts";
    testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, 4e-3);
    testing::expect_error_within(what + " mlp2", errors.mlp2, 1e-4);
  }
}

// FP8 activations: the quantiser byte for byte and scale for scale against cuda_fp8.h's host conversion of the same
// arithmetic, on rows of mixed magnitudes, a row of zeros, and values that round to e4m3's largest, 448.
TEST_F(CudaMoe, Fp8QuantiserMatchesTheHostConversion) {
  const int rows = 37, cols = 2880;
  std::vector<float> x = testing::round_to(Precision::bf16, testing::random_floats(rng_, static_cast<size_t>(rows) * cols));
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < cols; ++i) x[r * cols + i] = testing::round_to(Precision::bf16, {x[r * cols + i] * std::ldexp(1.0f, r - 18)})[0];
  std::fill_n(x.begin() + 5 * cols, cols, 0.0f);
  const DeviceBuffer x_d = testing::upload_as(Precision::bf16, x);
  DeviceBuffer q_d(static_cast<size_t>(rows) * cols), scale_d(rows * 4);
  cuda::launch_quantize_rows_e4m3(nullptr, x_d.get(), rows, cols, q_d.as<uint8_t>(), scale_d.as<float>());
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = cuda::to_host<uint8_t>(q_d.get(), static_cast<size_t>(rows) * cols);
  const auto scale = cuda::to_host<float>(scale_d.get(), rows);
  std::vector<uint8_t> want(cols);
  int at_max = 0;
  for (int r = 0; r < rows; ++r) {
    const float want_scale = quantize_row_e4m3(x.data() + static_cast<size_t>(r) * cols, cols, want.data());
    ASSERT_EQ(scale[r], want_scale) << "row " << r;
    for (int i = 0; i < cols; ++i) {
      ASSERT_EQ(q[static_cast<size_t>(r) * cols + i], want[i]) << "row " << r << " column " << i;
      at_max += (want[i] & 0x7f) == 0x7e;
    }
  }
  EXPECT_EQ(scale[5], 1.0f);
  EXPECT_GE(at_max, rows - 1);  // each nonzero row's largest value becomes +-448
  cuda::launch_quantize_rows_e4m3(nullptr, x_d.get(), 0, cols, q_d.as<uint8_t>(), scale_d.as<float>());  // no rows
  EXPECT_THROW(cuda::launch_quantize_rows_e4m3(nullptr, x_d.get(), rows, 100, q_d.as<uint8_t>(), scale_d.as<float>()),
               Error);
}

// The fp32 second projection's bound with FP8 inputs, on the quantised inputs' reference. mma.sync (decode_mma)
// accumulates e4m3 products in fp32 (measured ~1e-7, the bf16 paths' 1e-4 holds). wgmma e4m3 (prefill_wgmma) keeps
// its accumulator to fewer bits (DeepSeek-V3's report: about 14): measured on an H200 1.5e-4 / 2.7e-4 / 8.9e-4 at
// K = 160 / 320 / 2,880, a random walk of 2^-13.4 relative per k32 step over K / 32 steps; the bound is 1.5 times
// 2^-13 sqrt(K / 32). (mlp1's bf16 output rounding, 4e-3, covers its own.)
double fp8_mlp2_bound(MoePath path, int K) {
  if (path != MoePath::prefill_wgmma && path != MoePath::prefill_wgmma_split && path != MoePath::prefill_wgmma_hot)
    return 1e-4;
  return 1.5 * std::ldexp(1.0, -13) * std::sqrt(K / 32.0);
}

// The FP8 paths (decode_mma, prefill_wgmma) against the reference on the quantised inputs, at skewed routing and
// at the tile edges (odd widths: K tails of 96 and 160 inside a 128-k chunk) and at gpt-oss-120b's expert shape;
// what FP8 costs against bf16 inputs is printed.
TEST_F(CudaMoe, Fp8ActivationPathsMatchCpuOnQuantisedInputs) {
  const std::vector<MoePath> fp8_paths = {MoePath::decode_mma_n8,  MoePath::decode_mma_n16,   MoePath::decode_mma_n32,
                                          MoePath::decode_mma_n64, MoePath::decode_mma_mixed, MoePath::prefill_wgmma,
                                          MoePath::prefill_wgmma_split, MoePath::prefill_wgmma_hot};
  struct Case {
    Shape shape;
    Routing routing;
    std::string label;
  };
  std::vector<Case> cases;
  cases.push_back({kManyPairs, counted_routing(rng_, {1, 8, 16, 17, 33, 65, 129, 0}, 2), "edge counts"});
  cases.push_back({kMedium, skewed_routing(rng_, kMedium.E, 70, 4), "skewed T70"});
  cases.push_back({kOddTail, skewed_routing(rng_, kOddTail.E, 9, 2), "skewed T9"});
  cases.push_back({k120b, counted_routing(rng_, {1, 7, 8, 9, 16, 17, 33, 40, 3, 0, 2, 5, 30, 25}, 4), "120b counts"});
  for (Case& c : cases) {
    const MoeCase moe(Precision::bf16, c.shape, std::move(c.routing), rng_, /*fp8=*/true);
    for (MoePath path : fp8_paths) {
      const MoeErrors errors = moe.run(path);
      const std::string what = std::string("moe fp8 ") + cuda::moe_path_name(path) + " " + c.shape.name + " " + c.label;
      testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, 4e-3);
      testing::expect_error_within(what + " mlp2", errors.mlp2, fp8_mlp2_bound(path, c.shape.I));
      testing::expect_error_within(what + " mlp1 against bf16 inputs", errors.mlp1_fp8_cost, 0.1);
      testing::expect_error_within(what + " mlp2 against bf16 inputs", errors.mlp2_fp8_cost, 0.1);
      std::printf("%s: error %.2e / %.2e on the quantised inputs, %.2e / %.2e against bf16 inputs\n", what.c_str(),
                  errors.mlp1, errors.mlp2, errors.mlp1_fp8_cost, errors.mlp2_fp8_cost);
    }
    // Paths without FP8 refuse its inputs instead of reading x.
    EXPECT_THROW(moe.run(MoePath::prefill_mma, {}), Error);
  }
}

// The FP8 grouped GEMM on weights whose rows' block scales span widely: up to 14 (blocks at k = -2 .. 12 of
// moe_layout.h, the tables' slow path included) the e4m3 weights are exact and the error is the same as at span 1;
// at 20 the smallest blocks of wide rows are rounded (each at least 2^-14 below its row's largest block), counted
// on the device as on the host, and the error stays within the same bounds.
TEST_F(CudaMoe, Fp8GroupedGemmFoldsWideScaleSpans) {
  for (int span : {14, 20}) {
    const MoeCase moe(Precision::bf16, kMedium, skewed_routing(rng_, kMedium.E, 200, 4), rng_, /*fp8=*/true, span);
    EXPECT_EQ(moe.wide_rows(), moe.host_wide_rows());
    if (span == 14) {
      EXPECT_EQ(moe.wide_rows(), 0);
    } else {
      EXPECT_GT(moe.wide_rows(), 0);
    }
    const MoeErrors errors = moe.run(MoePath::prefill_wgmma);
    const std::string what = "moe fp8 prefill-wgmma span " + std::to_string(span);
    testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, 4e-3);
    testing::expect_error_within(what + " mlp2", errors.mlp2, fp8_mlp2_bound(MoePath::prefill_wgmma, kMedium.I));
    std::printf("%s: %d wide rows, error %.2e / %.2e on the quantised inputs\n", what.c_str(), moe.wide_rows(),
                errors.mlp1, errors.mlp2);
  }
}

// prefill_wgmma_hot: the experts of at least min_rows rows (the first `slots` of them in expert order) take their
// weights ready from the scratch the launch dequantised them into, the others are converted by the producers as in
// prefill_wgmma, in one launch. Settings: every expert with rows hot (min_rows 1, as many slots as experts); the
// experts of 129 rows or more (five, two and two of the cases'); the same with 2 slots, so that later hot experts fall back to converting; and none
// hot (the split path's work). bf16 and FP8 activations, on K tails and partial weight tiles (96 x 160) and at
// gpt-oss-120b's widths (two of the experts' 128-row tiles and their last rows on the 32-row tiles).
TEST_F(CudaMoe, HotExpertsMatchCpuAtEverySlotCount) {
  struct Case {
    Shape shape;
    std::vector<int> counts;
    int k;
  };
  const std::vector<Case> cases = {{kManyPairs, {1, 300, 129, 64, 0, 193, 257, 131}, 2},
                                   {kOddTail, {130, 2, 200, 128}, 2},
                                   {k120b, {130, 0, 3, 129, 20}, 2}};
  const std::vector<std::pair<int, int>> settings = {{8, 1}, {8, 129}, {2, 129}, {8, 1 << 20}};  // (slots, min_rows)
  for (const Case& c : cases)
    for (bool fp8 : {false, true}) {
      const MoeCase moe(Precision::bf16, c.shape, counted_routing(rng_, c.counts, c.k), rng_, fp8);
      for (const auto& [slots, min_rows] : settings) {
        cuda::MoeGemmParams::Hot hot;
        hot.slots = slots;
        hot.min_rows = min_rows;
        const MoeErrors errors = moe.run(MoePath::prefill_wgmma_hot, {}, hot);
        const std::string what = std::string("moe prefill-wgmma-hot ") + (fp8 ? "fp8 " : "bf16 ") + c.shape.name +
                                 " slots " + std::to_string(slots) + " min_rows " + std::to_string(min_rows);
        testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, 4e-3);
        testing::expect_error_within(what + " mlp2", errors.mlp2,
                                     fp8 ? fp8_mlp2_bound(MoePath::prefill_wgmma_hot, c.shape.I) : 1e-4);
      }
    }
  // Slots out of range: the launcher's clear error, not a launch.
  const MoeCase moe(Precision::bf16, kManyPairs, counted_routing(rng_, {1, 300, 129, 64, 0, 193, 257, 131}, 2), rng_);
  cuda::MoeGemmParams::Hot bad;
  bad.slots = 0;
  EXPECT_THROW(moe.run(MoePath::prefill_wgmma_hot, {}, bad), Error);
}

// The second projection's bf16 rows (MoeGemmParams::out_bf16, CudaRunnerOptions::expert_out_bf16) on every path
// that writes them, bf16 and FP8 activations, at skewed routing with odd widths and at gpt-oss-120b's widths with the
// hot path's experts hot: the fp32 rows' bounds plus one bf16 rounding of each output (2^-9 relative at most, 2e-3).
// The other paths and the first projection refuse the flag.
TEST_F(CudaMoe, SecondProjectionWritesBf16RowsWhereItsPathCan) {
  struct Case {
    Shape shape;
    Routing routing;
  };
  std::vector<Case> cases;
  cases.push_back({kOddTail, skewed_routing(rng_, kOddTail.E, 150, 2)});
  cases.push_back({k120b, counted_routing(rng_, {130, 0, 3, 129, 20, 33}, 2)});
  for (Case& c : cases) {
    const Routing routing = c.routing;
    for (bool fp8 : {false, true}) {
      const MoeCase moe(Precision::bf16, c.shape, routing, rng_, fp8);
      cuda::MoeGemmParams::Hot hot;
      hot.min_rows = 129;
      int paths = 0;
      for (MoePath path : cuda::kMoePaths) {
        if (!cuda::moe_path_writes_bf16(path) || (fp8 && !cuda::moe_path_takes_fp8(path))) continue;
        ++paths;
        const MoeErrors errors = moe.run(path, {}, hot, /*out_bf16=*/true);
        const std::string what = std::string("moe bf16 rows out ") + cuda::moe_path_name(path) +
                                 (fp8 ? " fp8 " : " bf16 ") + c.shape.name;
        testing::expect_error_within(what + " mlp1+swiglu", errors.mlp1, 4e-3);
        testing::expect_error_within(what + " mlp2", errors.mlp2,
                                     (fp8 ? fp8_mlp2_bound(path, c.shape.I) : 1e-4) + 2e-3);
      }
      EXPECT_EQ(paths, fp8 ? 8 : 10);
    }
    const MoeCase moe(Precision::bf16, c.shape, routing, rng_);
    EXPECT_THROW(moe.run(MoePath::decode_x1, {}, {}, true), Error);
    EXPECT_THROW(moe.run(MoePath::prefill_mma, {}, {}, true), Error);
  }
}

// The mixed grouping's tile list: every expert's rows covered once, in order, by tiles of the width its own count
// picks (moe_mixed_tile_rows), listed by class (32-, 16-, then 8-row tiles) with each class's count, every class
// within the bound its launch's grid is sized by.
TEST_F(CudaMoe, MixedGroupingCoversEachExpertWithItsWidth) {
  const std::vector<int> wanted = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200, 3};
  const int E = static_cast<int>(wanted.size()), k = 1;
  std::vector<int32_t> experts;
  for (int e = 0; e < E; ++e) experts.insert(experts.end(), wanted[e], e);
  std::shuffle(experts.begin(), experts.end(), rng_);
  const int T = static_cast<int>(experts.size());
  for (const cuda::MoeMixedBounds bounds : {cuda::MoeMixedBounds{}, cuda::MoeMixedBounds{8, 16},
                                            cuda::MoeMixedBounds{1, 1}, cuda::MoeMixedBounds{100, 100}}) {
    cuda::MoeBuffers buffers;
    buffers.grow(T, k, E);
    cuda::MoeRouting routing = buffers.routing();
    routing.mixed = bounds;
    MOESERVE_CUDA_CHECK(cudaMemcpy(routing.expert_counts, wanted.data(), E * 4, cudaMemcpyHostToDevice));
    DeviceBuffer experts_d = cuda::to_device(experts);
    cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, cuda::kMoeMixedTileRows, routing);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto counts = cuda::to_host<int32_t>(routing.num_tiles, 4);
    const int tiles = counts[0];
    const std::string label = std::to_string(bounds.n8_max) + ":" + std::to_string(bounds.n16_max);
    ASSERT_EQ(tiles, counts[1] + counts[2] + counts[3]) << label;
    for (int cls = 0; cls < 3; ++cls)
      EXPECT_LE(counts[1 + cls], cuda::moe_mixed_class_max_tiles(T * k, cls, bounds, E)) << label << " class " << cls;
    const auto tile_expert = cuda::to_host<int32_t>(routing.tile_expert, tiles);
    const auto tile_row0 = cuda::to_host<int32_t>(routing.tile_row0, tiles);
    const auto offsets = cuda::to_host<int32_t>(routing.expert_offsets, E + 1);
    std::vector<int> covered(E, 0);
    for (int i = 0; i < tiles; ++i) {
      const int e = tile_expert[i];
      ASSERT_TRUE(e >= 0 && e < E) << label << " tile " << i;
      const int width = i < counts[1] ? 32 : i < counts[1] + counts[2] ? 16 : 8;
      EXPECT_EQ(width, cuda::moe_mixed_tile_rows(wanted[e], bounds)) << label << " expert " << e;
      EXPECT_EQ(tile_row0[i], offsets[e] + covered[e]) << label << " expert " << e << " tile " << i;
      covered[e] += width;
    }
    for (int e = 0; e < E; ++e) {
      EXPECT_EQ(offsets[e + 1] - offsets[e], wanted[e]) << label << " expert " << e;
      // Covered by whole tiles: at least its rows, less than one tile more.
      EXPECT_GE(covered[e], wanted[e]) << label << " expert " << e;
      EXPECT_LT(covered[e] - wanted[e], wanted[e] == 0 ? 1 : cuda::moe_mixed_tile_rows(wanted[e], bounds))
          << label << " expert " << e;
    }
  }
}

// The split grouping's tile list (prefill_wgmma_split): each expert's rows covered once, in order, by its whole
// 128-row tiles and then either one more 128-row tile or, for at most split_max last rows, 32-row tiles
// (moe_split_small_rows); the 128-row tiles listed first, each class's count in num_tiles[1 + class] and within the
// bound its launch's grid is sized by.
TEST_F(CudaMoe, SplitGroupingCoversEachExpert) {
  const std::vector<int> wanted = {0, 1, 31, 32, 33, 64, 65, 127, 128, 129, 160, 161, 192, 193, 255, 256, 300, 3};
  const int E = static_cast<int>(wanted.size()), k = 1;
  std::vector<int32_t> experts;
  for (int e = 0; e < E; ++e) experts.insert(experts.end(), wanted[e], e);
  std::shuffle(experts.begin(), experts.end(), rng_);
  const int T = static_cast<int>(experts.size());
  for (int split_max : {0, 32, 64, 127}) {
    cuda::MoeBuffers buffers;
    buffers.grow(T, k, E);
    cuda::MoeRouting routing = buffers.routing();
    routing.mixed.split_max = split_max;
    MOESERVE_CUDA_CHECK(cudaMemcpy(routing.expert_counts, wanted.data(), E * 4, cudaMemcpyHostToDevice));
    DeviceBuffer experts_d = cuda::to_device(experts);
    cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, cuda::kMoeSplitTileRows, routing);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto counts = cuda::to_host<int32_t>(routing.num_tiles, 4);
    const std::string label = "split " + std::to_string(split_max);
    ASSERT_EQ(counts[0], counts[1] + counts[2]) << label;
    EXPECT_EQ(counts[3], 0) << label;
    for (int cls = 0; cls < 2; ++cls)
      EXPECT_LE(counts[1 + cls], cuda::moe_split_class_max_tiles(T * k, cls, split_max, E)) << label << " class " << cls;
    const auto tile_expert = cuda::to_host<int32_t>(routing.tile_expert, counts[0]);
    const auto tile_row0 = cuda::to_host<int32_t>(routing.tile_row0, counts[0]);
    const auto offsets = cuda::to_host<int32_t>(routing.expert_offsets, E + 1);
    // Rows each expert's 128-row tiles cover, then its 32-row tiles.
    std::vector<int> wide(E, 0), narrow(E, 0);
    for (int i = 0; i < counts[0]; ++i) {
      const int e = tile_expert[i];
      ASSERT_TRUE(e >= 0 && e < E) << label << " tile " << i;
      const bool is_wide = i < counts[1];
      const int small = wanted[e] % 128 <= split_max ? wanted[e] % 128 : 0;
      if (is_wide) {
        EXPECT_EQ(tile_row0[i], offsets[e] + wide[e]) << label << " expert " << e << " tile " << i;
        wide[e] += 128;
      } else {
        EXPECT_EQ(tile_row0[i], offsets[e] + (wanted[e] - small) + narrow[e]) << label << " expert " << e;
        narrow[e] += 32;
      }
    }
    int want_wide = 0, want_narrow = 0;
    for (int e = 0; e < E; ++e) {
      EXPECT_EQ(offsets[e + 1] - offsets[e], wanted[e]) << label << " expert " << e;
      const int small = wanted[e] % 128 <= split_max ? wanted[e] % 128 : 0;
      EXPECT_EQ(small, cuda::moe_split_small_rows(wanted[e], split_max)) << label << " expert " << e;
      // The 128-row tiles cover the rows before the small ones, less than a tile over; the 32-row ones the rest.
      EXPECT_GE(wide[e], wanted[e] - small) << label << " expert " << e;
      EXPECT_LT(wide[e] - (wanted[e] - small), wanted[e] == small ? 1 : 128) << label << " expert " << e;
      EXPECT_GE(narrow[e], small) << label << " expert " << e;
      EXPECT_LT(narrow[e] - small, small == 0 ? 1 : 32) << label << " expert " << e;
      want_wide += (wanted[e] - small + 127) / 128;
      want_narrow += (small + 31) / 32;
    }
    EXPECT_EQ(counts[1], want_wide) << label;
    EXPECT_EQ(counts[2], want_narrow) << label;
    if (split_max == 0) {
      EXPECT_EQ(counts[2], 0) << label;
    }
  }
  EXPECT_THROW(cuda::moe_split_class_max_tiles(100, 2, 64, 8), Error);
  EXPECT_THROW(cuda::moe_split_class_max_tiles(100, 0, 128, 8), Error);
}

// One grouping's outputs on the host, from the two launches (launch_route_top_k, launch_group_by_expert) or the
// fused one (launch_route_top_k_and_group).
struct Grouped {
  std::vector<int32_t> experts;
  std::vector<uint32_t> weight_bits;
  std::vector<int32_t> offsets, row_token, row_expert, slot_row, num_tiles, tile_expert, tile_row0, counts;
};

struct RouteCase {
  int T, E, k;
  int local, first;  // this rank's experts (all, from 0, unless expert parallel)
  int rows_per_tile;
  cuda::MoeMixedBounds mixed;
  std::string label() const {
    return "T" + std::to_string(T) + " E" + std::to_string(E) + " k" + std::to_string(k) + " experts " +
           std::to_string(first) + "+" + std::to_string(local) + " tile rows " + std::to_string(rows_per_tile) +
           (rows_per_tile == cuda::kMoeMixedTileRows
                ? " mixed " + std::to_string(mixed.n8_max) + ":" + std::to_string(mixed.n16_max)
            : rows_per_tile == cuda::kMoeSplitTileRows ? " split " + std::to_string(mixed.split_max)
                                                       : "");
  }
};

// The grouping that `launch(routing, experts, weights)` makes for case c, read back.
template <typename Launch>
Grouped grouped_by(const RouteCase& c, Launch&& launch) {
  cuda::MoeBuffers buffers;
  buffers.grow(c.T, c.k, c.local, c.first, c.E);
  cuda::MoeRouting routing = buffers.routing();
  routing.mixed = c.mixed;
  const int pairs = c.T * c.k;
  DeviceBuffer experts_d(std::max(pairs, 1) * 4), weights_d(std::max(pairs, 1) * 4);
  launch(routing, experts_d.as<int32_t>(), weights_d.as<float>());
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  Grouped g;
  g.experts = cuda::to_host<int32_t>(experts_d.get(), pairs);
  g.weight_bits = cuda::to_host<uint32_t>(weights_d.get(), pairs);
  g.offsets = cuda::to_host<int32_t>(routing.expert_offsets, c.local + 1);
  const int rows = g.offsets[c.local];
  g.row_token = cuda::to_host<int32_t>(routing.row_token, rows);
  g.row_expert = cuda::to_host<int32_t>(routing.row_expert, rows);
  g.slot_row = cuda::to_host<int32_t>(routing.slot_row, pairs);
  // Fixed tiling writes the total only; mixed tiling each class's count too.
  const bool classed = c.rows_per_tile == cuda::kMoeMixedTileRows || c.rows_per_tile == cuda::kMoeSplitTileRows;
  g.num_tiles = cuda::to_host<int32_t>(routing.num_tiles, classed ? 4 : 1);
  g.tile_expert = cuda::to_host<int32_t>(routing.tile_expert, g.num_tiles[0]);
  g.tile_row0 = cuda::to_host<int32_t>(routing.tile_row0, g.num_tiles[0]);
  g.counts = cuda::to_host<int32_t>(routing.expert_counts, c.E);
  return g;
}

Grouped route_and_group(const RouteCase& c, const DeviceBuffer& logits_d, bool fused) {
  return grouped_by(c, [&](const cuda::MoeRouting& routing, int32_t* experts, float* weights) {
    if (fused) {
      cuda::launch_route_top_k_and_group(nullptr, logits_d.as<float>(), c.T, c.E, c.k, experts, weights,
                                         c.rows_per_tile, routing);
    } else {
      cuda::launch_route_top_k(nullptr, logits_d.as<float>(), c.T, c.E, c.k, experts, weights, routing.expert_counts);
      cuda::launch_group_by_expert(nullptr, experts, c.T, c.k, c.rows_per_tile, routing);
    }
  });
}

// Every pair's row inside its expert's range, holding its token and expert, no row taken twice; another rank's
// pairs without a row. (With equal experts and offsets, two groupings that pass this hold the same pairs per expert.)
void expect_rows_consistent(const Grouped& g, const RouteCase& c, const std::string& what) {
  std::vector<bool> taken(g.row_token.size(), false);
  for (int i = 0; i < c.T * c.k; ++i) {
    const int e = g.experts[i] - c.first, row = g.slot_row[i];
    if (e < 0 || e >= c.local) {
      ASSERT_EQ(row, -1) << what << " pair " << i;
      continue;
    }
    ASSERT_TRUE(row >= g.offsets[e] && row < g.offsets[e + 1]) << what << " pair " << i << " row " << row;
    ASSERT_FALSE(taken[row]) << what << " row " << row << " twice";
    taken[row] = true;
    EXPECT_EQ(g.row_token[row], i / c.k) << what << " row " << row;
    EXPECT_EQ(g.row_expert[row], e) << what << " row " << row;
  }
}

// Router logits with many ties (quarter steps; token 1 all equal) and skewed popularity (expert e's logits lowered
// by log(1 + e) / 2), so that some experts get several tokens and the mixed tiling's classes all occur.
std::vector<float> tied_skewed_logits(std::mt19937& rng, int T, int E) {
  std::vector<float> logits = testing::random_floats(rng, static_cast<size_t>(T) * E);
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < E; ++e) {
      float& v = logits[static_cast<size_t>(t) * E + e];
      v = t == 1 ? 1.0f : std::round(4.0f * (v - 0.5f * std::log1p(static_cast<float>(e)))) / 4.0f;
    }
  return logits;
}

// Grouping a made as grouping b: experts, weights (bits), offsets, tile counts and lists, and (rows) every row's token
// and expert and every pair's row; a's expert_counts zero after it.
void expect_same_grouping(const Grouped& a, const Grouped& b, bool rows, int E, const std::string& what) {
  ASSERT_EQ(a.experts, b.experts) << what;
  EXPECT_EQ(a.weight_bits, b.weight_bits) << what;
  ASSERT_EQ(a.offsets, b.offsets) << what;
  ASSERT_EQ(a.num_tiles, b.num_tiles) << what;
  EXPECT_EQ(a.tile_expert, b.tile_expert) << what;
  EXPECT_EQ(a.tile_row0, b.tile_row0) << what;
  if (rows) {
    EXPECT_EQ(a.row_token, b.row_token) << what;
    EXPECT_EQ(a.row_expert, b.row_expert) << what;
    EXPECT_EQ(a.slot_row, b.slot_row) << what;
  }
  EXPECT_EQ(a.counts, std::vector<int32_t>(E, 0)) << what;
}

// The fused router + grouping against the two launches it replaces, field by field: experts equal (and equal to
// cpu::route_top_k's: ties to the lower expert id), weights bit for bit, offsets, tile counts and tile lists equal,
// both groupings' rows consistent with their pairs, the fused one's rows in (token, slot) order inside each expert
// (the two launches' order varies with their atomics), and expert_counts zero after both. At every tile size the
// paths use (the mixed tiling at two bounds: 1:2 puts one-, two- and more-row experts in each class), at T up to
// the largest that fits, at top-8's 512 pairs, and for an expert-parallel rank (experts 64..95 of 128).
TEST_F(CudaMoe, FusedRouteAndGroupMatchTheTwoLaunches) {
  std::vector<RouteCase> cases;
  std::vector<int> tile_rows;
  for (MoePath path : cuda::kMoePaths)
    if (std::find(tile_rows.begin(), tile_rows.end(), cuda::moe_rows_per_tile(path)) == tile_rows.end())
      tile_rows.push_back(cuda::moe_rows_per_tile(path));
  for (int E : {128, 32}) {
    int max_T = 0;
    while (cuda::route_group_fused_fits(max_T + 1, 4, E)) ++max_T;
    ASSERT_EQ(max_T, cuda::kRouteGroupMaxTokens);
    for (int T : {1, 2, 7, 16, 64, max_T})
      for (int rows_per_tile : tile_rows) {
        cases.push_back({T, E, 4, E, 0, rows_per_tile, {}});
        if (rows_per_tile == cuda::kMoeMixedTileRows) cases.push_back({T, E, 4, E, 0, rows_per_tile, {1, 2}});
      }
    cases.push_back({max_T, E, 8, E, 0, 8, {}});
    cases.push_back({max_T, E, 8, E, 0, cuda::kMoeMixedTileRows, {1, 2}});
  }
  for (int T : {16, 64}) {
    cases.push_back({T, 128, 4, 32, 64, 8, {}});
    cases.push_back({T, 128, 4, 32, 64, cuda::kMoeMixedTileRows, {1, 2}});
  }
  for (const RouteCase& c : cases) {
    const std::string what = "route+group " + c.label();
    const std::vector<float> logits = tied_skewed_logits(rng_, c.T, c.E);
    const DeviceBuffer logits_d = cuda::to_device(logits);
    const Grouped two = route_and_group(c, logits_d, false), fused = route_and_group(c, logits_d, true);
    std::vector<int32_t> cpu_experts(c.T * c.k);
    std::vector<float> cpu_weights(c.T * c.k);
    cpu::route_top_k(logits.data(), c.T, c.E, c.k, cpu_experts.data(), cpu_weights.data());
    ASSERT_EQ(fused.experts, cpu_experts) << what;
    expect_same_grouping(fused, two, false, c.E, what);
    EXPECT_EQ(two.counts, std::vector<int32_t>(c.E, 0)) << what;
    expect_rows_consistent(two, c, what + " (two launches)");
    expect_rows_consistent(fused, c, what + " (fused)");
    for (size_t row = 1; row < fused.row_token.size(); ++row) {
      if (fused.row_expert[row] == fused.row_expert[row - 1]) {
        EXPECT_LT(fused.row_token[row - 1], fused.row_token[row]) << what << " row " << row;
      }
    }
  }
  EXPECT_FALSE(cuda::route_group_fused_fits(cuda::kRouteGroupMaxTokens + 1, 4, 128));
  EXPECT_THROW(cuda::launch_route_top_k_and_group(nullptr, nullptr, cuda::kRouteGroupMaxTokens + 1, 128, 4, nullptr,
                                                  nullptr, 8, cuda::MoeBuffers().routing()),
               Error);
}

// The router's projection, top-k and grouping in one launch (steps of 1-4 tokens) against the dense GEMV followed by
// the fused top-k + grouping above: logits, experts and weights bit for bit, and the whole grouping (offsets, tiles,
// rows in (token, slot) order) equal, at E 128 and 32 (gpt-oss-120b / 20b), top-4 and top-8, fixed and mixed tiles and
// an expert-parallel rank; launched twice on one counter, which each launch leaves at zero.
TEST_F(CudaMoe, RouterProjectionRouteAndGroupMatchTheTwoLaunches) {
  const int K = 2880;
  DeviceBuffer counter = cuda::to_device(std::vector<int32_t>(1, 0));
  std::vector<RouteCase> cases;
  for (int E : {128, 32})
    for (int T = 1; T <= cuda::kMaxDenseGemvRows; ++T) {
      cases.push_back({T, E, 4, E, 0, 8, {}});
      cases.push_back({T, E, 4, E, 0, cuda::kMoeMixedTileRows, {1, 2}});
    }
  cases.push_back({4, 128, 8, 128, 0, 16, {}});
  cases.push_back({3, 128, 4, 32, 64, 8, {}});
  for (const RouteCase& c : cases) {
    const std::string what = "router+route+group " + c.label();
    ASSERT_TRUE(cuda::router_route_group_fused_supported(c.T, K, c.E, c.k)) << what;
    const auto x = testing::random_floats(rng_, static_cast<size_t>(c.T) * K);
    const auto w = testing::round_to(Precision::bf16, testing::random_floats(rng_, static_cast<size_t>(c.E) * K, 0.0f, 0.05f));
    const auto bias = testing::random_floats(rng_, c.E);
    const DeviceBuffer x_d = testing::upload_as(Precision::bf16, x), w_d = testing::upload_as(Precision::bf16, w),
                       bias_d = cuda::to_device(bias);
    DeviceBuffer logits_two(static_cast<size_t>(c.T) * c.E * 4), logits_one(static_cast<size_t>(c.T) * c.E * 4);
    cuda::launch_dense_gemv(nullptr, x_d.get(), c.T, w_d.get(), c.E, K, bias_d.as<float>(), logits_two.as<float>());
    const Grouped two = route_and_group(c, logits_two, true);
    for (int launch = 0; launch < 2; ++launch) {
      const Grouped one = grouped_by(c, [&](const cuda::MoeRouting& routing, int32_t* experts, float* weights) {
        cuda::launch_router_route_and_group(nullptr, x_d.get(), c.T, w_d.get(), K, bias_d.as<float>(), c.E, c.k,
                                            logits_one.as<float>(), experts, weights, c.rows_per_tile, routing,
                                            counter.as<int32_t>());
      });
      const std::string at = what + " launch " + std::to_string(launch);
      ASSERT_EQ(cuda::to_host<uint32_t>(logits_one.get(), c.T * c.E), cuda::to_host<uint32_t>(logits_two.get(), c.T * c.E))
          << at;
      expect_same_grouping(one, two, true, c.E, at);
      EXPECT_EQ(cuda::to_host<int32_t>(counter.get(), 1), std::vector<int32_t>(1, 0)) << at;
    }
  }
  EXPECT_FALSE(cuda::router_route_group_fused_supported(5, K, 128, 4));
  EXPECT_FALSE(cuda::router_route_group_fused_supported(1, 4104, 128, 4));
  EXPECT_FALSE(cuda::router_route_group_fused_supported(1, K, 512, 4));
  EXPECT_THROW(cuda::launch_router_route_and_group(nullptr, nullptr, 5, nullptr, K, nullptr, 128, 4, nullptr, nullptr,
                                                   nullptr, 8, cuda::MoeBuffers().routing(), nullptr),
               Error);
}

// The same edges at the real expert shapes (1.6 GB of 120b experts): a fixture of its own, outside the "CudaMoe*"
// filter the compute-sanitizer stage of benchmarks/cuda/h200_check_and_bench.sh runs.
class CudaFullWidthMoe : public CudaMoe {};

TEST_F(CudaFullWidthMoe, EveryPathMatchesCpuAtTileEdges) {
  for (const Shape& s : {k120b, k20b})
    check(Precision::bf16, kBf16Paths, s, counted_routing(rng_, edge_counts(s.E), 4), "edge counts");
}

// A step with no rows launches nothing and writes nothing.
TEST_F(CudaMoe, NoRowsWritesNothing) {
  cuda::MoeBuffers buffers;
  buffers.grow(0, 4, 8);
  DeviceBuffer out(64 * 4);
  MOESERVE_CUDA_CHECK(cudaMemset(out.get(), 0x5a, out.bytes()));
  HostExperts w(rng_, 8, 64, 64, -3);
  cuda::MoeGemmParams p;
  p.w = w.view();
  p.x = out.get();
  p.out = out.get();
  p.routing = buffers.routing();
  p.rows = 0;
  for (MoePath path : cuda::kMoePaths) cuda::launch_moe_path(nullptr, path, Precision::bf16, p);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  for (uint8_t byte : cuda::to_host<uint8_t>(out.get(), out.bytes())) ASSERT_EQ(byte, 0x5a);
}

// Shapes the kernels cannot take are refused before anything is launched (no device needed).
TEST(CudaMoeLaunch, RejectsShapesNamingTheKernel) {
  cuda::MoeGemmParams p;
  p.routing.num_experts = 4;
  p.rows = 8;
  p.w.out_features = 63;
  p.w.in_features = 64;
  for (MoePath path : cuda::kMoePaths) {
    try {
      cuda::launch_moe_path(nullptr, path, Precision::bf16, p);
      ADD_FAILURE() << cuda::moe_path_name(path) << " launched with out_features 63";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out_features 63"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("moe_"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moeserve
