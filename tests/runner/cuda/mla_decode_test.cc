// The MLA cache write and decode kernels (mla_cache_write.cu, mla_decode.cu, mla_decode_mma.cu) against the CPU,
// and absorb -> decode -> un-absorb end to end (mla_absorb.cu's own tests: mla_absorb_test.cc), over a paged latent
// cache with scattered block tables, several sequences of different lengths in one step, chunked steps (a row sees
// the step's earlier rows) and contexts from 1 to 3,000, at DeepSeek-V3's widths (128 heads, latent 512, rope 64)
// and the tiny model's (4 heads, latent 144, rope 16).
//
// Cache write: against cpu::rms_norm and cpu::rope_adjacent_pairs (what cpu::MlaAttention::forward writes), per
// element within the rounding of the cache's type (f32, bf16, fp8 e4m3 with a scale other than 1) plus 1e-5 of the
// row's largest value (fp32 sums in another order, cosf against std::cos); every byte outside the step's rows
// stays as it was. The fp8 cache saturates (MlaCacheWriteParams: stored = value / scale, saturated to +-448), and
// k_pe is not normed: kv_a's rope half (std 2, times the factor 1.25: std 2.5) passes 448 * 0.02 = 8.96 about
// once per 3,000 values, and 8.96 * 16 / 15 = 9.56, where the saturated error outgrows e4m3's half-ulp bound,
// once per 7,000: the first GPU run's worst element (1.007 of its bound, v3 chunks: 4,928 rope values) was a
// k_pe of ~9.56 stored as 8.96, not a rounding difference. One rope pair is made large (25 to 35 after the
// rotation) so that every run saturates; the expected value is the reference clamped to +-448 * scale.
// Decode, both kernel versions (mla_layout.h's MlaDecodeVersion): against the absorbed formula of
// cpu::MlaAttention::attend_absorbed in double precision, on the same stored cache values (bf16, fp8 dequantised
// with the layer's scale). Version 1 is fp32 throughout, so its bound is fp32 rounding (2e-5 of the output's
// norm). Against the unrounded fp32 cache the logs state what the cache's rounding costs. Expected from the
// rounding: a latent value moves by ~1.6e-3 (bf16) or ~2.6e-2 (e4m3) of itself (rms), the output directly by as
// much, and a score by scale * sqrt(576) * that (~5e-3 or ~8e-2 at V3's scale 0.135), which reweights the keys;
// the bounds, 2e-2 (bf16) and 0.25 (fp8), are about three times those sums.
// Version 2 rounds two more things to bf16 (8 significant bits, ~1.6e-3 rms of a value), with fp32 sums: q~ (and
// q_pe) after the score scale, and p. A query value off by a relative d_k moves a score by scale * sum_k q_k c_k d_k,
// whose rms over 576 unit-variance products is scale * sqrt(576) * 1.6e-3 = 5.2e-3 at V3's scale; a score off
// by ds reweights its key by e^ds, which moves the output by about rms(ds) of its norm (o = sum_j p_j c_j, the
// change sum_j p_j ds_j (c_j - o)). p off by 1.6e-3 of itself reweights the keys directly, 1.6e-3 of the output
// (the sum is of the rounded p, so the output stays an average of the rows under the weights used). Their sum,
// 6.8e-3, times three as for the cache: 2e-2 on the same cache values, for bf16 and fp8 alike (e4m3 values are
// exact in bf16; the fp8 scale is a factor of the query's and the output's). Against the fp32 cache the two
// roundings add: 2e-2 + 2e-2 (bf16), 0.25 + 2e-2 (fp8). The tiny widths (sqrt(160) products, a smaller scale)
// sit inside the same bounds. Every slot no query may see holds NaN.
// End to end: q (cpu::linear of x, the call forward makes) and a paged bf16 latent cache through launch_mla_absorb,
// launch_mla_decode (both versions) and launch_mla_unabsorb, against cpu::MlaAttention::forward in its absorbed
// form on the same latents (o_proj the identity, so forward's output is the heads' outputs). The bound is the
// decode's on the same cache values plus 3e-5 for the CPU's own fp32 rounding and the two fp32 projections; W_UV
// carries o~'s error to o at the norm ratio it carries o~ (it is independent of both: they depend on the cache,
// q and W_UK only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "mla_test_util.h"
#include "model/deepseek_v3/config.h"
#include "model/deepseek_v3/make_tiny.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cpu/mla.h"
#include "runner/cpu/ops.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;
using cuda::MlaWeightType;
using testing::CudaMla;
using testing::KvbWeight;
using testing::MlaWidths;
using testing::tiny_widths;
using testing::v3_widths;

constexpr int kBlockSize = 16;
constexpr int kLayers = 2;  // the kernels run layer 1: a wrong layer stride shows
constexpr int kLayer = 1;
constexpr float kFp8Scale = 0.02f;  // values up to ~6 stored as up to ~300 of e4m3's 448
constexpr double kLatentNormEps = 1e-6;  // kv_a_layernorm's (cpu/mla.cc)

// The tiny widths with 132 heads (version 1: a last pass of 4 heads; version 2: a second block of heads whose first
// slab is a quarter full).
const MlaWidths& tiny_132_heads() {
  static const MlaWidths w = [] {
    MlaWidths widths{"tiny-132-heads", deepseek_v3::tiny_config({})};
    widths.config.num_heads = 132;
    return widths;
  }();
  return w;
}

struct MlaCase {
  std::string name;
  std::vector<int> contexts;  // positions each sequence has after the step
  std::vector<int> q_lens;    // its tokens in the step: the last q_len positions
};

const char* kv_name(KvDtype kv) { return kv == KvDtype::f32 ? "f32" : kv == KvDtype::bf16 ? "bf16" : "fp8"; }

int multiprocessors() {
  int count = 0;
  MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0));
  return count;
}

// A step's StepView built by hand (one KV group): sequences s with tokens at positions starts[s] .. contexts[s] - 1,
// block tables scattered over a pool of num_blocks.
struct MlaStep {
  std::vector<int> starts, contexts, q_lens;
  std::vector<std::vector<int32_t>> tables;
  int64_t num_blocks = 0;
  int T = 0, max_context = 0;
  DeviceBuffer buffer;
  cuda::StepView view;

  MlaStep(std::mt19937& rng, const MlaCase& mc) : contexts(mc.contexts), q_lens(mc.q_lens) {
    const int S = static_cast<int>(contexts.size());
    for (int s = 0; s < S; ++s) starts.push_back(contexts[s] - q_lens[s]);
    tables = testing::scattered_tables(rng, starts, contexts, 0, kBlockSize, &num_blocks);
    std::vector<int32_t> positions, token_seq, q_start;
    for (int s = 0; s < S; ++s) {
      q_start.push_back(T);
      for (int i = 0; i < q_lens[s]; ++i, ++T) {
        positions.push_back(starts[s] + i);
        token_seq.push_back(s);
      }
      max_context = std::max(max_context, contexts[s]);
    }
    size_t stride = 0;
    for (const auto& t : tables) stride = std::max(stride, t.size());
    std::vector<int32_t> data;
    auto append = [&](const std::vector<int32_t>& v) {
      const size_t at = data.size();
      data.insert(data.end(), v.begin(), v.end());
      return at;
    };
    const size_t positions_at = append(positions), token_seq_at = append(token_seq), q_start_at = append(q_start),
                 q_len_at = append(std::vector<int32_t>(q_lens.begin(), q_lens.end())),
                 context_at = append(std::vector<int32_t>(contexts.begin(), contexts.end())),
                 stride_at = append({static_cast<int32_t>(stride)}), tables_at = data.size();
    for (const auto& t : tables) {
      append(t);
      data.resize(data.size() + stride - t.size(), -1);
    }
    buffer = cuda::to_device(data);
    const int32_t* d = buffer.as<int32_t>();
    view.num_tokens = T;
    view.num_seqs = S;
    view.num_groups = 1;
    view.positions = d + positions_at;
    view.token_seq = d + token_seq_at;
    view.seq_q_start = d + q_start_at;
    view.seq_q_len = d + q_len_at;
    view.seq_context = d + context_at;
    view.table_stride = d + stride_at;
    view.block_tables = d + tables_at;
  }

  // Element offset of sequence s's position in the pool (layer kLayer).
  int64_t offset(const cuda::MlaCacheShape& shape, int s, int position) const {
    return cuda::mla_position_offset(shape, tables[s].data(), kLayer, position);
  }
};

cuda::MlaCacheShape shape_of(const MlaWidths& w) {
  return {w.config.kv_lora_rank, w.config.qk_rope_head_dim, kBlockSize, kLayers};
}

// ---- cache write -------------------------------------------------------------------------------------------------

// The worst element's error as a fraction of its bound (<= 1 passes).
double cache_write_error(const MlaWidths& w, const MlaCase& mc, KvDtype dtype, std::mt19937& rng) {
  const deepseek_v3::Config& config = w.config;
  const cuda::MlaCacheShape shape = shape_of(w);
  const int L = config.kv_lora_rank, R = config.qk_rope_head_dim, W = L + R;
  MlaStep step(rng, mc);
  auto kv_a = testing::random_floats(rng, static_cast<size_t>(step.T) * W, 0.0f, 2.0f);
  kv_a[L] = kv_a[L + 1] = 20.0f;  // token 0's first k_pe pair: rotated, one of the two is >= 20 * 1.25 > 8.96
  const auto norm_weight = testing::random_floats(rng, L, 1.0f, 0.3f);
  const auto inv_freq = config.rope_inverse_frequencies();
  // V3's attention factor is 1 (mscale = mscale_all_dim); 1.25 times it, so that a factor left out shows.
  const float factor = 1.25f * config.rope_attention_factor();
  const size_t elem = cuda::kv_element_bytes(dtype);
  const size_t pool_bytes = step.num_blocks * cuda::mla_block_elements(shape) * elem;
  DeviceBuffer pool(pool_bytes), kv_a_d = cuda::to_device(kv_a), weight_d = cuda::to_device(norm_weight),
      inv_freq_d = cuda::to_device(inv_freq);
  MOESERVE_CUDA_CHECK(cudaMemset(pool.get(), 0xa5, pool_bytes));
  const float scale = dtype == KvDtype::fp8_e4m3 ? kFp8Scale : 1.0f;
  const cuda::MlaCacheWriteParams params{kv_a_d.as<float>(), weight_d.as<float>(), static_cast<float>(kLatentNormEps),
                                         inv_freq_d.as<float>(), factor, cuda::MlaCacheView{pool.get(), shape, dtype},
                                         kLayer, 0, scale};
  cuda::launch_mla_cache_write(nullptr, params, step.view);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> bytes = cuda::to_host<uint8_t>(pool.get(), pool_bytes);

  auto decode = [&](size_t element) -> float {
    const uint8_t* at = bytes.data() + element * elem;
    if (dtype == KvDtype::f32) {
      float v;
      std::memcpy(&v, at, 4);
      return v;
    }
    if (dtype == KvDtype::bf16) {
      uint32_t bits = static_cast<uint32_t>(at[0]) << 16 | static_cast<uint32_t>(at[1]) << 24;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    return testing::from_e4m3({*at}, [&](size_t) { return scale; })[0];
  };
  // The bound per element, from the one rounding each type makes of the kernel's fp32 value v (the kernel goes
  // from fp32 straight to the cache's type, no bf16 step in between):
  // - bf16 keeps 8 significant bits: for 2^e <= |v| < 2^(e+1) half an ulp is 2^(e-8) <= 2^-8 |v|.
  // - e4m3 stores rn(v / scale) with 4 significant bits for |v / scale| >= 2^-6: half an ulp is 2^(e-4)
  //   <= 2^-4 |v|; below 2^-6 the subnormals' spacing is 2^-9, half of it 2^-10 (times the scale, decoded). Past
  //   448 it saturates to 448: the expected value is the reference clamped to +-448 * scale, exact there.
  // - The kernel's v differs from the CPU's by fp32 rounding (the mean of squares summed in another order, x / scale
  //   as x * (1 / scale), cosf): the 1e-5 of the row's largest value covers it, also where it moves a value across
  //   a rounding boundary (an error of half an ulp plus that difference).
  const double relative = dtype == KvDtype::f32 ? 1e-6 : dtype == KvDtype::bf16 ? 0x1p-8 : 0x1p-4;
  const double absolute = dtype == KvDtype::fp8_e4m3 ? 0x1p-10 * scale : 0.0;  // half e4m3's smallest subnormal
  const double saturated = dtype == KvDtype::fp8_e4m3 ? 448.0 * scale : INFINITY;
  double worst = 0.0;
  std::vector<float> ref(W);
  std::vector<bool> written(pool_bytes, false);
  int t = 0;
  for (size_t s = 0; s < step.contexts.size(); ++s)
    for (int i = 0; i < step.q_lens[s]; ++i, ++t) {
      const int position = step.starts[s] + i;
      const float* x = kv_a.data() + static_cast<size_t>(t) * W;
      cpu::rms_norm(x, norm_weight.data(), 1, L, kLatentNormEps, ref.data());
      std::copy_n(x + L, R, ref.data() + L);
      cpu::rope_adjacent_pairs(ref.data() + L, 1, R, R, position, inv_freq, factor);
      float row_max = 0.0f;
      for (float v : ref) row_max = std::max(row_max, std::fabs(v));
      const int64_t at = step.offset(shape, static_cast<int>(s), position);
      for (int e = 0; e < W; ++e) {
        const double expected = std::clamp(static_cast<double>(ref[e]), -saturated, saturated);
        const double bound = relative * std::fabs(expected) + absolute + 1e-5 * row_max;
        worst = std::max(worst, std::fabs(decode(at + e) - expected) / bound);
        for (size_t b = 0; b < elem; ++b) written[(at + e) * elem + b] = true;
      }
    }
  size_t touched = 0;
  for (size_t b = 0; b < pool_bytes; ++b) touched += !written[b] && bytes[b] != 0xa5;
  EXPECT_EQ(touched, 0u) << "bytes outside the step's rows changed";
  return worst;
}

const std::vector<MlaCase>& write_cases() {
  static const std::vector<MlaCase> all = {
      {"decode", {1, 17, 300, 2049, 3000}, {1, 1, 1, 1, 1}},
      {"chunks", {40, 130, 33}, {40, 20, 17}},
  };
  return all;
}


TEST_F(CudaMla, CacheWriteMatchesTheCpu) {
  for (const MlaWidths* w : {&v3_widths(), &tiny_widths()})
    for (const MlaCase& mc : write_cases())
      for (KvDtype dtype : {KvDtype::f32, KvDtype::bf16, KvDtype::fp8_e4m3})
        testing::expect_error_within("mla cache write " + w->name + " " + mc.name + " " + kv_name(dtype) +
                                         " (worst element / its bound)",
                                     cache_write_error(*w, mc, dtype, rng_), 1.0);
}

// ---- decode attention --------------------------------------------------------------------------------------------

// The absorbed form (cpu::MlaAttention::attend_absorbed) in double over a host copy of the cache: out [T, heads, L].
std::vector<float> absorbed_reference(const MlaWidths& w, const MlaStep& step, const std::vector<float>& cache,
                                      const std::vector<float>& q_latent, const std::vector<float>& q_rope,
                                      float scale) {
  const cuda::MlaCacheShape shape = shape_of(w);
  const int H = w.config.num_heads, L = w.config.kv_lora_rank, R = w.config.qk_rope_head_dim;
  std::vector<float> out(static_cast<size_t>(step.T) * H * L);
  std::vector<double> scores, sum(L);
  int t = 0;
  for (size_t s = 0; s < step.contexts.size(); ++s)
    for (int i = 0; i < step.q_lens[s]; ++i, ++t) {
      const int position = step.starts[s] + i;
      scores.resize(position + 1);
      for (int h = 0; h < H; ++h) {
        const float* ql = q_latent.data() + (static_cast<size_t>(t) * H + h) * L;
        const float* qr = q_rope.data() + (static_cast<size_t>(t) * H + h) * R;
        double m = -INFINITY;
        for (int j = 0; j <= position; ++j) {
          const float* row = cache.data() + step.offset(shape, static_cast<int>(s), j);
          double nope = 0.0, pe = 0.0;
          for (int k = 0; k < L; ++k) nope += static_cast<double>(ql[k]) * row[k];
          for (int k = 0; k < R; ++k) pe += static_cast<double>(qr[k]) * row[L + k];
          scores[j] = (nope + pe) * scale;
          m = std::max(m, scores[j]);
        }
        double total = 0.0;
        for (double& v : scores) total += (v = std::exp(v - m));
        std::fill(sum.begin(), sum.end(), 0.0);
        for (int j = 0; j <= position; ++j) {
          const float* row = cache.data() + step.offset(shape, static_cast<int>(s), j);
          for (int k = 0; k < L; ++k) sum[k] += scores[j] / total * row[k];
        }
        float* o = out.data() + (static_cast<size_t>(t) * H + h) * L;
        for (int k = 0; k < L; ++k) o[k] = static_cast<float>(sum[k]);
      }
    }
  return out;
}

// The bounds on the output's relative error (derived in the header): on the same cache values, and against the
// fp32 cache.
double same_values_bound(cuda::MlaDecodeVersion version) {
  return version == cuda::MlaDecodeVersion::v1 ? 2e-5 : 2e-2;
}
double fp32_cache_bound(cuda::MlaDecodeVersion version, bool fp8) {
  return (fp8 ? 0.25 : 2e-2) + (version == cuda::MlaDecodeVersion::v1 ? 0.0 : 2e-2);
}

void expect_decode_case(const MlaWidths& w, const MlaCase& mc, cuda::MlaDecodeVersion version, std::mt19937& rng) {
  const deepseek_v3::Config& config = w.config;
  const cuda::MlaCacheShape shape = shape_of(w);
  const int H = config.num_heads, L = config.kv_lora_rank, R = config.qk_rope_head_dim, W = L + R;
  MlaStep step(rng, mc);
  const size_t pool_elements = step.num_blocks * cuda::mla_block_elements(shape);
  // Unit-variance latents at the visible positions (every one of positions 0 .. context - 1), NaN elsewhere.
  std::vector<float> exact(pool_elements, NAN);
  for (size_t s = 0; s < step.contexts.size(); ++s)
    for (int j = 0; j < step.contexts[s]; ++j) {
      const auto row = testing::random_floats(rng, W);
      std::copy(row.begin(), row.end(), exact.begin() + step.offset(shape, static_cast<int>(s), j));
    }
  const auto q_latent = testing::random_floats(rng, static_cast<size_t>(step.T) * H * L);
  const auto q_rope = testing::random_floats(rng, static_cast<size_t>(step.T) * H * R);
  const float scale = config.softmax_scale();
  const auto exact_ref = absorbed_reference(w, step, exact, q_latent, q_rope, scale);
  DeviceBuffer q_latent_d = cuda::to_device(q_latent), q_rope_d = cuda::to_device(q_rope),
               out_d(exact_ref.size() * sizeof(float));

  for (KvDtype dtype : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
    const bool fp8 = dtype == KvDtype::fp8_e4m3;
    std::vector<float> stored_values;
    DeviceBuffer pool;
    if (fp8) {
      auto bytes = testing::to_e4m3(exact, [](size_t) { return kFp8Scale; });
      for (size_t i = 0; i < exact.size(); ++i)
        if (std::isnan(exact[i])) bytes[i] = 0x7f;  // e4m3's NaN
      stored_values = testing::from_e4m3(bytes, [](size_t) { return kFp8Scale; });
      pool = cuda::to_device(bytes);
    } else {
      stored_values = testing::round_to(cuda::Precision::bf16, exact);
      pool = testing::upload_as(cuda::Precision::bf16, exact);
    }
    const auto ref = absorbed_reference(w, step, stored_values, q_latent, q_rope, scale);
    const cuda::MlaDecodeParams params{q_latent_d.as<float>(), q_rope_d.as<float>(), out_d.as<float>(), scale, H,
                                       cuda::MlaCacheView{pool.get(), shape, dtype}, kLayer, 0,
                                       fp8 ? kFp8Scale : 1.0f};
    const int planned = cuda::mla_decode_split_keys(step.T, step.max_context, multiprocessors());
    for (int split_keys : {planned, 16, 48, 64}) {
      const int max_splits = cuda::mla_decode_splits(step.max_context - 1, split_keys);
      DeviceBuffer partial(cuda::mla_decode_partial_floats(step.T, H, L, max_splits) * sizeof(float));
      MOESERVE_CUDA_CHECK(cudaMemset(out_d.get(), 0xff, out_d.bytes()));  // NaN where a row is never written
      cuda::launch_mla_decode(nullptr, params, step.view,
                              cuda::MlaDecodeScratch{split_keys, max_splits, partial.as<float>()}, version);
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto out = cuda::to_host<float>(out_d.get(), exact_ref.size());
      const std::string what = std::string("mla decode ") + cuda::mla_decode_version_name(version) + " " + w.name +
                               " " + mc.name + " " + kv_name(dtype) + " split_keys " + std::to_string(split_keys);
      testing::expect_error_within(what + " (same cache values)", testing::relative_error(out, ref),
                                   same_values_bound(version));
      if (split_keys == planned)
        testing::expect_error_within(what + " (against the fp32 cache)", testing::relative_error(out, exact_ref),
                                     fp32_cache_bound(version, fp8));
    }
  }
}

// The decode tests, once per kernel version: Versions/CudaMlaDecode.DecodeV3Widths/v1, .../v2 and so on.
class CudaMlaDecode : public CudaMla, public ::testing::WithParamInterface<cuda::MlaDecodeVersion> {};

TEST_P(CudaMlaDecode, DecodeV3Widths) {
  expect_decode_case(v3_widths(), {"decode", {1, 17, 300, 2049, 3000}, {1, 1, 1, 1, 1}}, GetParam(), rng_);
  expect_decode_case(v3_widths(), {"chunks", {24, 150, 1000}, {24, 9, 3}}, GetParam(), rng_);
}

TEST_P(CudaMlaDecode, DecodeTinyWidths) {
  expect_decode_case(tiny_widths(), {"decode", {1, 16, 17, 64, 65, 2500}, {1, 1, 1, 1, 1, 1}}, GetParam(), rng_);
  expect_decode_case(tiny_widths(), {"prefill and chunks", {70, 200, 33, 3000}, {70, 40, 16, 5}}, GetParam(),
                     rng_);
  expect_decode_case(tiny_132_heads(), {"decode", {1, 70, 300}, {1, 1, 1}}, GetParam(), rng_);
}

// absorb -> decode -> un-absorb against cpu::MlaAttention::forward (absorbed) with `heads` heads of the widths,
// q_proj instead of q_lora (q = x W_q^T, forward's own call) and o_proj the identity (hidden = heads * v_head_dim).
void expect_end_to_end(const MlaWidths& widths, int heads, const MlaCase& mc, cuda::MlaDecodeVersion version,
                       std::mt19937& rng) {
  deepseek_v3::Config c = widths.config;
  c.num_heads = heads;
  c.q_lora_rank = 0;
  c.hidden_size = heads * c.v_head_dim;
  const int H = heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, W = L + R, hidden = c.hidden_size;
  const cuda::MlaCacheShape shape = shape_of(widths);
  MlaStep step(rng, mc);
  ThreadPool pool(0);

  auto f32_matrix = [](std::vector<float>& values, int64_t rows, int64_t cols) {
    deepseek_v3::Linear l;
    l.dense = Matrix{DType::F32, reinterpret_cast<const uint8_t*>(values.data()), rows, cols};
    return l;
  };
  const float x_std = 1.0f / std::sqrt(static_cast<float>(hidden));
  std::vector<float> q_w = testing::random_floats(rng, static_cast<size_t>(H) * c.qk_head_dim() * hidden, 0, x_std),
                     kv_a_w = testing::random_floats(rng, static_cast<size_t>(W) * hidden, 0, x_std),
                     o_w(static_cast<size_t>(hidden) * hidden, 0.0f);
  for (int i = 0; i < hidden; ++i) o_w[static_cast<size_t>(i) * hidden + i] = 1.0f;
  const KvbWeight kv_b(rng, c, MlaWeightType::fp8_block);
  deepseek_v3::Attention w;
  w.q = f32_matrix(q_w, static_cast<int64_t>(H) * c.qk_head_dim(), hidden);
  w.kv_a = f32_matrix(kv_a_w, W, hidden);
  w.kv_a_norm.assign(L, 1.0f);
  w.kv_b = kv_b.linear;
  w.o = f32_matrix(o_w, hidden, hidden);

  // The visible latents, bf16 values (what the cache holds) at their pool offsets, NaN elsewhere; the key sets point
  // at them, so forward attends over the very values the GPU reads. Its own latent writes go to `written`, unread.
  std::vector<float> cache(step.num_blocks * cuda::mla_block_elements(shape), NAN), written(step.T * W);
  std::vector<cpu::MlaKeySet> key_sets(step.contexts.size());
  for (size_t s = 0; s < step.contexts.size(); ++s)
    for (int j = 0; j < step.contexts[s]; ++j) {
      const auto row = testing::round_to(cuda::Precision::bf16, testing::random_floats(rng, W));
      const int64_t at = step.offset(shape, static_cast<int>(s), j);
      std::copy(row.begin(), row.end(), cache.begin() + at);
      key_sets[s].latents.push_back(cache.data() + at);
    }
  std::vector<cpu::MlaQuery> queries;
  for (size_t s = 0; s < step.contexts.size(); ++s)
    for (int i = 0; i < step.q_lens[s]; ++i) {
      cpu::MlaQuery query{step.starts[s] + i, written.data() + queries.size() * W, static_cast<int32_t>(s), {}};
      for (int j = 0; j <= query.position; ++j) query.visible.push_back(j);
      queries.push_back(std::move(query));
    }
  const auto x = testing::random_floats(rng, static_cast<size_t>(step.T) * hidden);
  std::vector<float> ref(static_cast<size_t>(step.T) * hidden), q(static_cast<size_t>(step.T) * H * c.qk_head_dim());
  cpu::MlaAttention(c, cpu::MlaForm::absorbed).forward(pool, w, x.data(), queries, key_sets, ref.data());
  cpu::linear(pool, x.data(), step.T, w.q, q.data());

  const auto inv_freq = c.rope_inverse_frequencies();
  DeviceBuffer q_d = cuda::to_device(q), inv_freq_d = cuda::to_device(inv_freq),
               pool_d = testing::upload_as(cuda::Precision::bf16, cache),
               q_latent_d(static_cast<size_t>(step.T) * H * L * 4), q_rope_d(static_cast<size_t>(step.T) * H * R * 4),
               latent_out_d(q_latent_d.bytes()), out_d(ref.size() * 4);
  cuda::launch_mla_absorb(nullptr,
                          {q_d.as<float>(), R, inv_freq_d.as<float>(), c.rope_attention_factor(), kv_b.view,
                           q_latent_d.as<float>(), q_rope_d.as<float>()},
                          step.view);
  const int split_keys = cuda::mla_decode_split_keys(step.T, step.max_context, multiprocessors());
  const int max_splits = cuda::mla_decode_splits(step.max_context - 1, split_keys);
  DeviceBuffer partial(cuda::mla_decode_partial_floats(step.T, H, L, max_splits) * sizeof(float));
  const cuda::MlaDecodeParams decode{q_latent_d.as<float>(), q_rope_d.as<float>(), latent_out_d.as<float>(),
                                     c.softmax_scale(), H, cuda::MlaCacheView{pool_d.get(), shape, KvDtype::bf16},
                                     kLayer, 0, 1.0f};
  cuda::launch_mla_decode(nullptr, decode, step.view, {split_keys, max_splits, partial.as<float>()}, version);
  cuda::launch_mla_unabsorb(nullptr, cuda::Precision::f32, {latent_out_d.as<float>(), kv_b.view, out_d.get()},
                            step.T);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  testing::expect_error_within(std::string("mla absorb, decode ") + cuda::mla_decode_version_name(version) +
                                   ", unabsorb " + widths.name + " (" + std::to_string(H) + " heads) " + mc.name +
                                   " against cpu::MlaAttention::forward",
                               testing::relative_error(cuda::to_host<float>(out_d.get(), ref.size()), ref),
                               same_values_bound(version) + 3e-5);
}

TEST_P(CudaMlaDecode, AbsorbDecodeUnabsorbMatchesForward) {
  expect_end_to_end(v3_widths(), 16, {"decode", {1, 17, 300, 2049}, {1, 1, 1, 1}}, GetParam(), rng_);
  expect_end_to_end(v3_widths(), 16, {"chunks", {24, 150}, {24, 9}}, GetParam(), rng_);
  expect_end_to_end(tiny_widths(), 4, {"decode", {1, 65, 2500}, {1, 1, 1}}, GetParam(), rng_);
  expect_end_to_end(tiny_widths(), 4, {"prefill and chunks", {70, 33}, {70, 16}}, GetParam(), rng_);
}

INSTANTIATE_TEST_SUITE_P(Versions, CudaMlaDecode,
                         ::testing::Values(cuda::MlaDecodeVersion::v1, cuda::MlaDecodeVersion::v2),
                         [](const ::testing::TestParamInfo<cuda::MlaDecodeVersion>& info) {
                           return std::string(cuda::mla_decode_version_name(info.param));
                         });

}  // namespace
}  // namespace moeserve
