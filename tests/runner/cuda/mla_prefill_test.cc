// The expanded-form MLA prefill (mla_prefill.cu: kv_b expansion of the paged latent cache, then FlashAttention-2 on
// tensor cores) against the CPU, on fresh random inputs, over scattered block tables: prompts of 1, 15, 16, 17, 64
// and 200 tokens in one step, once as whole prompts (start 0) and once after cached context (chunked prefill:
// starts 37, 5, 16, 100, 64, 300, so the 64-key blocks and the 64-row query tiles cut the causal diagonal at
// every offset), with a decode token of a sequence the call does not plan in the middle of the step, whose output
// row must stay untouched; bf16 and fp8 e4m3 latent caches (the pool's other layer and every unused slot NaN), kv_b
// bf16 and the checkpoint's e4m3 with 128 x 128 block scales, fp32 and bf16 outputs.
//   - Against cpu::MlaAttention::forward in its naive (expanded) form, at DeepSeek-V3's widths with 16 heads and at
//     the tiny model's (4 heads, latent 144: a partial last 128-block of kv_b's scales and of the latent; v_dim 40:
//     a padded value tile), q_proj instead of q_lora (the GPU takes q from the same cpu::linear call) and o_proj
//     the identity, so forward's output is the heads' outputs. The CPU's key sets point at the very values the
//     cache holds (bf16, or e4m3 times the layer's scale).
//   - At V3's full 128 heads (a whole o_proj identity would be 16,384 x 16,384), against the expanded formula in
//     double: the CPU's own expansion (cpu::linear of the latents through kv_b, attend_naive's call), q_pe rotated
//     by cpu::rope_adjacent_pairs with 1.25 times the config's factor (a factor left out shows).
//
// The bound on the output's relative L2 error, from the bf16 roundings the kernels make (8 significant bits: about
// 1.6e-3 rms of a value, as in mla_decode_test.cc); the expansion's operands are exact in bf16 (bf16 latents as
// stored, e4m3 values widened) and its sums fp32, so K_nope and V are the CPU's up to one bf16 rounding each:
//   - scores: q (times the scale) and K_nope rounded, k_pe exact. A product q_k k_k off by a relative d moves the
//     score by scale * sum_k q_k k_k d_k, rms scale * 1.6e-3 * sqrt(2 x 128 + 64) over unit-variance products
//     (both factors rounded in the 128 nope dims, q alone in the 64 rope dims): 0.135 * 1.6e-3 * 17.9 = 3.9e-3 at
//     V3's scale (the fp8 kv_b's keys have std ~1.2: 4.6e-3). A score off by ds reweights its key by e^ds, which
//     moves the output by about rms(ds) of its norm (the change sum_j p_j ds_j (v_j - o)).
//   - p rounded to bf16: 1.6e-3 of the output (the sum l is of the rounded p: the output stays an average).
//   - V rounded to bf16: 1.6e-3 (o = sum_j p_j v_j, its error sum_j p_j v_j d_j shrinks with o's norm as the
//     weights spread).
//   Their sum, 7.9e-3, times three as the decode tests take it: 2.4e-2. A bf16 output adds its own rounding,
//   1.6e-3 x 3: 2.9e-2. The CPU's fp32 rounding (3e-5) is inside. The tiny widths (sqrt(80) products, scale
//   48^-0.5 x m^2) sit inside the same bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "mla_forward_weights.h"
#include "mla_test_util.h"
#include "model/deepseek_v3/config.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cpu/mla.h"
#include "runner/cuda/mla_prefill.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;
using cuda::MlaWeightType;
using cuda::Precision;
using testing::CudaMla;
using testing::KvbWeight;
using testing::MlaWidths;
using testing::tiny_widths;
using testing::v3_widths;

constexpr int kBlockSize = 16;
constexpr int kLayers = 2;  // the kernels read layer 1: a wrong layer stride reads layer 0's NaN
constexpr int kLayer = 1;
constexpr float kFp8Scale = 0.02f;  // unit-variance latents stored as up to ~250 of e4m3's 448
constexpr double kBound = 2.4e-2;   // derived in the header
constexpr double kBf16OutBound = 2.9e-2;

struct PrefillCase {
  std::string name;
  std::vector<int> q_lens, starts;  // per planned sequence: its query tokens and the positions cached before them
};
const std::vector<PrefillCase>& prefill_cases() {
  static const std::vector<PrefillCase> all = {
      {"prompts", {1, 15, 16, 17, 64, 200}, {0, 0, 0, 0, 0, 0}},
      {"after cached context", {1, 15, 16, 17, 64, 200}, {37, 5, 16, 100, 64, 300}},
  };
  return all;
}

const char* kv_name(KvDtype kv) { return kv == KvDtype::bf16 ? "bf16" : "fp8"; }
const char* weight_name(MlaWeightType type) { return type == MlaWeightType::bf16 ? "bf16" : "fp8"; }

// The step of one call: the case's sequences in order with a bystander (a decode token at position 49 the plan
// leaves out) as step sequence 1, block tables scattered over a pool (one KV group), and the uploaded plan.
struct PrefillStep {
  static constexpr int kBystander = 1;
  std::vector<int> q_lens, contexts, q_starts;
  std::vector<std::vector<int32_t>> tables;
  int64_t num_blocks = 0;
  int T = 0;
  cuda::MlaPrefillPlan plan;
  DeviceBuffer tables_d, plan_d;
  cuda::StepView view;
  cuda::MlaPrefillWork work;

  PrefillStep(std::mt19937& rng, const PrefillCase& pc) {
    std::vector<cuda::MlaPrefillSequence> planned;
    for (size_t i = 0; i < pc.q_lens.size(); ++i) {
      if (i == kBystander) add(1, 50);
      planned.push_back({static_cast<int>(q_lens.size()), T, pc.q_lens[i], pc.starts[i] + pc.q_lens[i]});
      add(pc.q_lens[i], pc.starts[i] + pc.q_lens[i]);
    }
    tables = testing::scattered_tables(rng, std::vector<int>(contexts.size(), 0), contexts, 0, kBlockSize, &num_blocks);
    size_t stride = 0;
    for (const auto& t : tables) stride = std::max(stride, t.size());
    std::vector<int32_t> words{static_cast<int32_t>(stride)};
    for (const auto& t : tables) {
      words.insert(words.end(), t.begin(), t.end());
      words.resize(words.size() + stride - t.size(), -1);
    }
    tables_d = cuda::to_device(words);
    view.num_tokens = T;
    view.num_seqs = static_cast<int>(contexts.size());
    view.num_groups = 1;
    view.table_stride = tables_d.as<int32_t>();
    view.block_tables = tables_d.as<int32_t>() + 1;
    plan = cuda::mla_prefill_plan(planned);
    plan_d = cuda::to_device(plan.words);
    work = plan.view(plan_d.as<int32_t>());
  }
  void add(int q_len, int context) {
    q_starts.push_back(T);
    q_lens.push_back(q_len);
    contexts.push_back(context);
    T += q_len;
  }
  int start(int s) const { return contexts[s] - q_lens[s]; }
  // Element offset of sequence s's position in the pool (layer kLayer).
  int64_t offset(const cuda::MlaCacheShape& shape, int s, int position) const {
    return cuda::mla_position_offset(shape, tables[s].data(), kLayer, position);
  }
};

cuda::MlaCacheShape shape_of(const deepseek_v3::Config& c) {
  return {c.kv_lora_rank, c.qk_rope_head_dim, kBlockSize, kLayers};
}

// A pool whose every sequence's positions hold unit-variance latents, NaN elsewhere: `values` as the device reads
// them (bf16-rounded, or e4m3 times kFp8Scale), `device` the pool as stored.
struct LatentPool {
  std::vector<float> values;
  DeviceBuffer device;
  LatentPool(std::mt19937& rng, const cuda::MlaCacheShape& shape, const PrefillStep& step, KvDtype dtype) {
    std::vector<float> exact(step.num_blocks * cuda::mla_block_elements(shape), NAN);
    for (size_t s = 0; s < step.contexts.size(); ++s)
      for (int j = 0; j < step.contexts[s]; ++j) {
        const auto row = testing::random_floats(rng, cuda::mla_row_width(shape));
        std::copy(row.begin(), row.end(), exact.begin() + step.offset(shape, static_cast<int>(s), j));
      }
    if (dtype == KvDtype::fp8_e4m3) {
      auto bytes = testing::to_e4m3(exact, [](size_t) { return kFp8Scale; });
      for (size_t i = 0; i < exact.size(); ++i)
        if (std::isnan(exact[i])) bytes[i] = 0x7f;  // e4m3's NaN
      values = testing::from_e4m3(bytes, [](size_t) { return kFp8Scale; });
      device = cuda::to_device(bytes);
    } else {
      values = testing::round_to(Precision::bf16, exact);
      device = testing::upload_as(Precision::bf16, exact);
    }
  }
};

// Runs the prefill with each output type and checks the planned rows against `ref` [T, heads * v_dim] and the
// bystander's row untouched (NaN as set).
void run_and_check(const std::string& what, const PrefillStep& step, cuda::MlaPrefillParams params,
                   const std::vector<float>& ref) {
  const int width = params.kv_b.heads * params.kv_b.v_dim;
  const size_t rows = static_cast<size_t>(step.T) * params.kv_b.heads * params.kv_b.v_dim;
  DeviceBuffer scratch(cuda::mla_prefill_scratch_bytes(params.kv_b, params.cache.shape.rope_dim, step.plan.kv_rows)),
      out(rows * 4);
  params.scratch = scratch.get();
  params.out = out.get();
  // Each attention kernel that takes these widths: version 1 always, versions 2 and 3 (wgmma) at V3's.
  std::vector<int> versions = {1};
  if (cuda::mla_prefill_v2_fits(params.kv_b, params.cache.shape.rope_dim)) versions.insert(versions.end(), {2, 3});
  for (int version : versions) {
    for (Precision out_type : {Precision::f32, Precision::bf16}) {
      params.out_type = out_type;
      params.attention_version = version;
      ASSERT_EQ(cuda::mla_prefill_attention_version(params), version);
      MOESERVE_CUDA_CHECK(cudaMemset(out.get(), 0xff, out.bytes()));  // NaN in either type
      cuda::launch_mla_prefill(nullptr, params, step.work, step.view);
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto all = testing::download_as(out_type, out.get(), rows);
      std::vector<float> got, expected;
      for (size_t s = 0; s < step.contexts.size(); ++s) {
        const auto first = all.begin() + static_cast<int64_t>(step.q_starts[s]) * width;
        const auto last = first + static_cast<int64_t>(step.q_lens[s]) * width;
        if (s == PrefillStep::kBystander) {
          EXPECT_TRUE(std::all_of(first, last, [](float v) { return std::isnan(v); }))
              << what << " attention v" << version << ": the unplanned sequence's row was written";
          continue;
        }
        got.insert(got.end(), first, last);
        expected.insert(expected.end(), ref.begin() + (first - all.begin()), ref.begin() + (last - all.begin()));
      }
      testing::expect_error_within(what + " attention v" + std::to_string(version) + " out " +
                                       testing::precision_name(out_type),
                                   testing::relative_error(got, expected),
                                   out_type == Precision::f32 ? kBound : kBf16OutBound);
    }
  }
}

// Against cpu::MlaAttention::forward (naive) with `heads` heads of the widths, q_proj and o_proj the identity.
void expect_matches_forward(const MlaWidths& widths, int heads, const PrefillCase& pc, KvDtype dtype,
                            MlaWeightType kv_b_type, std::mt19937& rng) {
  const testing::MlaForwardWeights weights(rng, widths.config, heads, kv_b_type);
  const deepseek_v3::Config& c = weights.config;
  const int W = c.latent_width(), hidden = c.hidden_size, qk = c.qk_head_dim();
  const cuda::MlaCacheShape shape = shape_of(c);
  PrefillStep step(rng, pc);
  const LatentPool cache(rng, shape, step, dtype);
  ThreadPool pool(0);

  // The key sets point at the pool's values; forward's own latent writes go to `written`, never read.
  std::vector<float> written(static_cast<size_t>(step.T) * W);
  std::vector<cpu::MlaKeySet> key_sets(step.contexts.size());
  std::vector<cpu::MlaQuery> queries;
  for (size_t s = 0; s < step.contexts.size(); ++s) {
    for (int j = 0; j < step.contexts[s]; ++j)
      key_sets[s].latents.push_back(cache.values.data() + step.offset(shape, static_cast<int>(s), j));
    for (int i = 0; i < step.q_lens[s]; ++i) {
      cpu::MlaQuery query{step.start(static_cast<int>(s)) + i, written.data() + queries.size() * W,
                          static_cast<int32_t>(s), {}};
      for (int j = 0; j <= query.position; ++j) query.visible.push_back(j);
      queries.push_back(std::move(query));
    }
  }
  const auto x = testing::random_floats(rng, static_cast<size_t>(step.T) * hidden);
  std::vector<float> ref(static_cast<size_t>(step.T) * hidden), q(static_cast<size_t>(step.T) * heads * qk);
  cpu::MlaAttention(c, cpu::MlaForm::naive).forward(pool, weights.w, x.data(), queries, key_sets, ref.data());
  cpu::linear(pool, x.data(), step.T, weights.w.q, q.data());

  const auto inv_freq = c.rope_inverse_frequencies();
  DeviceBuffer q_d = cuda::to_device(q), inv_freq_d = cuda::to_device(inv_freq);
  cuda::MlaPrefillParams params;
  params.q = q_d.as<float>();
  params.inv_freq = inv_freq_d.as<float>();
  params.rope_factor = c.rope_attention_factor();
  params.scale = c.softmax_scale();
  params.kv_b = weights.kv_b.view;
  params.cache = {cache.device.get(), shape, dtype};
  params.layer = kLayer;
  params.kv_scale = dtype == KvDtype::fp8_e4m3 ? kFp8Scale : 1.0f;
  run_and_check("mla prefill " + widths.name + " (" + std::to_string(heads) + " heads) " + pc.name + ", " +
                    kv_name(dtype) + " cache, " + weight_name(kv_b_type) + " kv_b, against cpu::MlaAttention::forward",
                step, params, ref);
}

TEST_F(CudaMla, PrefillMatchesForwardV3Widths) {
  for (const PrefillCase& pc : prefill_cases())
    for (KvDtype dtype : {KvDtype::bf16, KvDtype::fp8_e4m3})
      for (MlaWeightType type : {MlaWeightType::fp8_block, MlaWeightType::bf16})
        expect_matches_forward(v3_widths(), 16, pc, dtype, type, rng_);
}

TEST_F(CudaMla, PrefillMatchesForwardTinyWidths) {
  for (const PrefillCase& pc : prefill_cases())
    for (KvDtype dtype : {KvDtype::bf16, KvDtype::fp8_e4m3})
      for (MlaWeightType type : {MlaWeightType::fp8_block, MlaWeightType::bf16})
        expect_matches_forward(tiny_widths(), tiny_widths().config.num_heads, pc, dtype, type, rng_);
}

// At V3's 128 heads, fp8 kv_b: against the expanded formula in double over the CPU's expansion.
void expect_full_heads(const PrefillCase& pc, KvDtype dtype, std::mt19937& rng) {
  const deepseek_v3::Config& c = v3_widths().config;
  const int H = c.num_heads, nope = c.qk_nope_head_dim, R = c.qk_rope_head_dim, v = c.v_head_dim, L = c.kv_lora_rank,
            qk = c.qk_head_dim(), per_head = c.kv_b_rows_per_head();
  const cuda::MlaCacheShape shape = shape_of(c);
  PrefillStep step(rng, pc);
  const LatentPool cache(rng, shape, step, dtype);
  const KvbWeight kv_b(rng, c, MlaWeightType::fp8_block);
  ThreadPool pool(0);
  const auto q = testing::random_floats(rng, static_cast<size_t>(step.T) * H * qk);
  const auto inv_freq = c.rope_inverse_frequencies();
  const float factor = 1.25f * c.rope_attention_factor(), scale = c.softmax_scale();

  std::vector<float> rotated = q, ref(static_cast<size_t>(step.T) * H * v, NAN);
  for (size_t s = 0; s < step.contexts.size(); ++s) {
    if (s == PrefillStep::kBystander) continue;
    const int S = static_cast<int>(s), n = step.contexts[s];
    std::vector<float> latents(static_cast<size_t>(n) * L), expanded(static_cast<size_t>(n) * H * per_head);
    for (int j = 0; j < n; ++j)
      std::copy_n(cache.values.begin() + step.offset(shape, S, j), L, latents.begin() + static_cast<int64_t>(j) * L);
    cpu::linear(pool, latents.data(), n, kv_b.linear, expanded.data());
    for (int i = 0; i < step.q_lens[s]; ++i)
      cpu::rope_adjacent_pairs(rotated.data() + static_cast<size_t>(step.q_starts[s] + i) * H * qk + nope, H, qk, R,
                               step.start(S) + i, inv_freq, factor);
    pool.parallel_for(static_cast<size_t>(step.q_lens[s]) * H, 1, [&](size_t begin, size_t end) {
      std::vector<double> scores, o(v);
      for (size_t item = begin; item < end; ++item) {
        const int i = static_cast<int>(item) / H, h = static_cast<int>(item) % H, t = step.q_starts[s] + i;
        const float* q_row = rotated.data() + (static_cast<size_t>(t) * H + h) * qk;
        scores.resize(step.start(S) + i + 1);
        double m = -INFINITY, total = 0.0;
        for (size_t j = 0; j < scores.size(); ++j) {
          const float* k_nope = expanded.data() + (j * H + h) * per_head;
          const float* k_pe = cache.values.data() + step.offset(shape, S, static_cast<int>(j)) + L;
          double dot = 0.0;
          for (int d = 0; d < nope; ++d) dot += static_cast<double>(q_row[d]) * k_nope[d];
          for (int d = 0; d < R; ++d) dot += static_cast<double>(q_row[nope + d]) * k_pe[d];
          scores[j] = dot * scale;
          m = std::max(m, scores[j]);
        }
        std::fill(o.begin(), o.end(), 0.0);
        for (size_t j = 0; j < scores.size(); ++j) {
          const double p = std::exp(scores[j] - m);
          total += p;
          const float* value = expanded.data() + (j * H + h) * per_head + nope;
          for (int e = 0; e < v; ++e) o[e] += p * value[e];
        }
        for (int e = 0; e < v; ++e) ref[(static_cast<size_t>(t) * H + h) * v + e] = static_cast<float>(o[e] / total);
      }
    });
  }

  DeviceBuffer q_d = cuda::to_device(q), inv_freq_d = cuda::to_device(inv_freq);
  cuda::MlaPrefillParams params;
  params.q = q_d.as<float>();
  params.inv_freq = inv_freq_d.as<float>();
  params.rope_factor = factor;
  params.scale = scale;
  params.kv_b = kv_b.view;
  params.cache = {cache.device.get(), shape, dtype};
  params.layer = kLayer;
  params.kv_scale = dtype == KvDtype::fp8_e4m3 ? kFp8Scale : 1.0f;
  run_and_check("mla prefill v3 (128 heads) " + pc.name + ", " + kv_name(dtype) +
                    " cache, fp8 kv_b, against the expanded formula in double",
                step, params, ref);
}

TEST_F(CudaMla, PrefillAtV3Heads) {
  const PrefillCase chunk{"a prompt and a chunk after 300 cached", {17, 200}, {0, 300}};
  for (KvDtype dtype : {KvDtype::bf16, KvDtype::fp8_e4m3}) expect_full_heads(chunk, dtype, rng_);
}

// Which attention kernel a launch runs (host only): versions 2 and 3 only at V3's widths, when asked by the params
// or, with none asked, by MOESERVE_MLA_PREFILL_ATTENTION=v2 / v3; otherwise version 1 (the default while the wgmma
// versions are unverified).
TEST(MlaPrefillPlan, AttentionVersionIsTwoOrThreeOnlyAtV3WidthsAndWhenAsked) {
  cuda::MlaPrefillParams v3;
  v3.kv_b.heads = 16, v3.kv_b.nope_dim = 128, v3.kv_b.v_dim = 128, v3.cache.shape.rope_dim = 64;
  cuda::MlaPrefillParams tiny = v3;
  tiny.kv_b.nope_dim = 32, tiny.kv_b.v_dim = 40, tiny.cache.shape.rope_dim = 16;
  EXPECT_TRUE(cuda::mla_prefill_v2_fits(v3.kv_b, 64));
  EXPECT_FALSE(cuda::mla_prefill_v2_fits(tiny.kv_b, 16));
  EXPECT_FALSE(cuda::mla_prefill_v2_fits(v3.kv_b, 32));
  ::unsetenv("MOESERVE_MLA_PREFILL_ATTENTION");
  for (int asked : {0, 1, 2, 3}) {
    v3.attention_version = tiny.attention_version = asked;
    EXPECT_EQ(cuda::mla_prefill_attention_version(v3), asked == 0 ? cuda::kMlaPrefillAttentionDefault : asked);
    EXPECT_EQ(cuda::mla_prefill_attention_version(tiny), 1);
  }
  ASSERT_EQ(::setenv("MOESERVE_MLA_PREFILL_ATTENTION", "v2", 1), 0);
  v3.attention_version = tiny.attention_version = 0;
  EXPECT_EQ(cuda::mla_prefill_attention_version(v3), 2);
  EXPECT_EQ(cuda::mla_prefill_attention_version(tiny), 1);
  v3.attention_version = 1;  // the params' own choice wins
  EXPECT_EQ(cuda::mla_prefill_attention_version(v3), 1);
  ASSERT_EQ(::setenv("MOESERVE_MLA_PREFILL_ATTENTION", "v3", 1), 0);
  v3.attention_version = 0;
  EXPECT_EQ(cuda::mla_prefill_attention_version(v3), 3);
  ASSERT_EQ(::setenv("MOESERVE_MLA_PREFILL_ATTENTION", "v9", 1), 0);
  EXPECT_EQ(cuda::mla_prefill_attention_version(v3), cuda::kMlaPrefillAttentionDefault);
  ::unsetenv("MOESERVE_MLA_PREFILL_ATTENTION");
}

// The work lists (host only: runs without a GPU).
TEST(MlaPrefillPlan, ListsSequencesTilesAndContextRows) {
  const cuda::MlaPrefillPlan plan = cuda::mla_prefill_plan({{0, 0, 64, 64}, {2, 65, 65, 100}, {3, 130, 1, 7}});
  EXPECT_EQ(plan.sequences, 3);
  EXPECT_EQ(plan.tiles, 1 + 2 + 1);
  EXPECT_EQ(plan.kv_rows, 64 + 100 + 7);
  const std::vector<int32_t> expected = {0, 2, 3, 0, 65, 130, 64, 65, 1, 0, 64, 164, 171, 0, 1, 1, 2, 0, 0, 64, 0};
  EXPECT_EQ(plan.words, expected);
  const cuda::MlaPrefillWork w = plan.view(plan.words.data());
  EXPECT_EQ(w.kv_row0[3], 171);
  EXPECT_EQ(w.tile_row0[2], 64);
  EXPECT_THROW(cuda::mla_prefill_plan({{0, 0, 5, 4}}), std::exception);  // more query tokens than the context
  EXPECT_THROW(cuda::mla_prefill_plan({{0, 0, 0, 4}}), std::exception);
}

}  // namespace
}  // namespace moeserve
