// The CUDA runner's attention paths end to end: a mixed step (prefill chunks through prefill tiles, decode tokens
// and short runs through decode groups, at once) against the CPU runner for every token; the fp8 e4m3 KV cache's
// logit error against the bf16 cache on the tiny model and on a two-layer model of gpt-oss-20b's full width, its
// halved block bytes and the refusals of --kv-cache-dtype values that do not fit; and, without a device, the step
// metadata's split of a step's tokens between the two attention kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "model/gpt_oss/checkpoint.h"
#include "model/gpt_oss/make_tiny.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/sequence_step.h"
#include "runner_compare.h"
#include "test_util.h"

namespace moeserve {
namespace {

using testing::full_width_two_layers;
using testing::prompt;

std::shared_ptr<const Checkpoint> open_tiny(const TinyModelOptions& options = {}) {
  return std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(options)));
}

std::unique_ptr<ModelRunner> cuda_runner(std::shared_ptr<const Checkpoint> checkpoint, const std::string& precision,
                                         const std::string& kv_cache_dtype = "auto") {
  CudaRunnerOptions options;
  options.precision = precision;
  options.kv_cache_dtype = kv_cache_dtype;
  return make_cuda_runner(std::move(checkpoint), options);
}

// Four sequences: prefixes cached by a first step, then one step of a decode token, a 40-token chunk, a 5-token
// run and a fresh 20-token prompt (tile row counts 40 and 20 >= 16: prefill; 1 and 5: decode groups). Returns the
// second step's logits for every token.
std::vector<float> mixed_step_logits(ModelRunner& runner) {
  const int vocab = runner.config().vocab_size, groups = kv_groups_of(runner.config()).num_groups(), block_size = 8;
  const std::vector<int> prefix = {45, 12, 70, 0}, step_tokens = {1, 40, 5, 20};
  const int blocks_each = 16;  // positions < 128
  const int n = static_cast<int>(prefix.size());
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(n) * groups * blocks_each});
  std::vector<int32_t> pool(n * groups * blocks_each);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(11));
  std::vector<std::vector<std::vector<int32_t>>> tables(n);
  for (int s = 0; s < n; ++s)
    for (int g = 0; g < groups; ++g)
      tables[s].emplace_back(pool.begin() + (s * groups + g) * blocks_each,
                             pool.begin() + (s * groups + g + 1) * blocks_each);
  std::vector<std::vector<int32_t>> tokens;
  for (int s = 0; s < n; ++s) tokens.push_back(prompt(prefix[s] + step_tokens[s], s + 3, vocab));
  ForwardOutput out;
  ForwardBatch first, second;
  for (int s = 0; s < n; ++s)
    if (prefix[s] > 0) first.sequences.push_back(testing::sequence_step(std::span(tokens[s]).first(prefix[s]), 0, tables[s], 1));
  runner.forward(first, out);
  for (int s = 0; s < n; ++s)
    second.sequences.push_back(testing::sequence_step(std::span(tokens[s]).subspan(prefix[s]), prefix[s], tables[s],
                                                      step_tokens[s]));
  runner.forward(second, out);
  return out.logits;
}

class CudaRunnerAttention : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
};

TEST_P(CudaRunnerAttention, MixedStepMatchesCpuRunner) {
  for (const TinyModelOptions& options : {TinyModelOptions{}, full_width_two_layers()}) {
    auto checkpoint = open_tiny(options);
    CpuRunner cpu(checkpoint, 0);
    auto gpu = cuda_runner(checkpoint, GetParam());
    const std::string what = options.hidden == 2880 ? "mixed step two-layer full width" : "mixed step tiny model";
    testing::expect_logits_close(what, GetParam(), mixed_step_logits(*gpu), mixed_step_logits(cpu),
                                 checkpoint->config().vocab_size);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaRunnerAttention, ::testing::Values("bf16", "f32"),
                         [](const auto& info) { return info.param; });

// The logits of `fp8` against those of `bf16` (same checkpoint) for the same prompts in one step (prefill tiles) and
// in chunks (decode groups and prefill tiles reading what earlier chunks stored): the median and worst row within
// their bounds, and the median above bf16's own rounding, or the fp8 runner did not round what it says it rounds.
void expect_fp8_rows_within(const std::string& what, const std::string& kind, const Checkpoint& checkpoint,
                            ModelRunner& bf16, ModelRunner& fp8, int chunk, double median_bound, double worst_bound) {
  const int vocab = checkpoint.config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {prompt(150, 4, vocab), prompt(21, 5, vocab), prompt(70, 6, vocab)};
  const testing::AllLogits expected = testing::run_prompts(bf16, prompts, chunk);
  const testing::AllLogits got = testing::run_prompts(fp8, prompts, chunk);
  for (const auto& [label, out, ref] : {std::tuple{"batched", &got.batched, &expected.batched},
                                        std::tuple{"chunked", &got.chunked, &expected.chunked}}) {
    const testing::RowErrors e = testing::row_errors(*out, *ref, vocab);
    std::printf("%s against bf16, %s %s: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", kind.c_str(),
                what.c_str(), label, e.rows, e.median, e.worst, e.above_5e2);
    testing::expect_error_within(kind + " " + what + " " + label + " median row", e.median, median_bound);
    testing::expect_error_within(kind + " " + what + " " + label + " worst row", e.worst, worst_bound);
    EXPECT_GT(e.median, 1e-4) << kind << " " << what << " " << label << ": the logits equal bf16's, so nothing was fp8";
  }
}

// The fp8 cache's logits against the bf16 cache's. Every cached K and V value is rounded to
// e4m3 (2^-4 relative at most, ~2.5% rms), which the random models carry to their logits: an emulation on the CPU
// runner (its f32 KV rounded to e4m3 as it is written, against the plain CPU runner, same prompts) measured a
// median row of 6.5e-2 and a worst of 0.70 on the tiny model, 4.2e-2 and 0.42 on the full-width one. The bounds
// are about twice those.
void expect_fp8_logits_close(const std::string& what, const TinyModelOptions& options, int chunk, double median_bound,
                             double worst_bound) {
  auto checkpoint = open_tiny(options);
  auto bf16 = cuda_runner(checkpoint, "bf16", "bf16"), fp8 = cuda_runner(checkpoint, "bf16", "fp8_e4m3");
  EXPECT_EQ(fp8->kv_block_bytes(16) * 2, bf16->kv_block_bytes(16)) << what << ": fp8 blocks take half the bytes";
  expect_fp8_rows_within(what, "fp8 KV", *checkpoint, *bf16, *fp8, chunk, median_bound, worst_bound);
}

TEST(CudaRunnerFp8Kv, TinyModelLogitErrorAgainstBf16Kv) {
  MOESERVE_REQUIRE_CUDA();
  expect_fp8_logits_close("tiny model", TinyModelOptions{}, 5, 0.15, 1.5);
}

TEST(CudaRunnerFp8Kv, FullWidthTwoLayerLogitErrorAgainstBf16Kv) {
  MOESERVE_REQUIRE_CUDA();
  expect_fp8_logits_close("two-layer full width", full_width_two_layers(), 50, 0.1, 1.0);
}

// FP8 activations (--activation-dtype fp8) against bf16 activations, both runners on the decode_mma paths for every
// step (--moe-path-table decode-mma-mixed), so that only the expert projections' input rounding differs: each
// input row is rounded to e4m3 with its own scale (2^-4 relative at most) before both projections of every layer.
// Measured on an H200 (2026-12-02, docs/PERF.md): median row 6.9e-2 and worst 0.44 on the tiny model, 3.4e-2 and
// 0.29 on the full-width one. The bounds are about twice those.
// With path "prefill-wgmma" every step runs the FP8 grouped GEMM instead (block scales folded into e4m3 exponents,
// exact for these weights; the tensor cores' own accumulation, ~2^-13.4 relative a k32 step: tests/runner/cuda/
// moe_test.cc), measured against the same bounds.
// dense_fp8_min_rows > 0: the QKV and output projections run on FP8 too from that many tokens a step.
std::unique_ptr<ModelRunner> fp8_activation_runner(std::shared_ptr<const Checkpoint> checkpoint,
                                                   const std::string& activation_dtype, const std::string& path,
                                                   int dense_fp8_min_rows = 0, bool qkv_fp8_fused = true,
                                                   bool o_fp8_fused = true) {
  CudaRunnerOptions o;
  o.precision = "bf16";
  o.activation_dtype = activation_dtype;
  o.moe_path_table = path;
  o.dense_fp8_min_rows = dense_fp8_min_rows;
  o.qkv_fp8_fused = qkv_fp8_fused;
  o.o_fp8_fused = o_fp8_fused;
  return make_cuda_runner(std::move(checkpoint), o);
}

void expect_fp8_activation_logits_close(const std::string& what, const TinyModelOptions& options, int chunk,
                                        double median_bound, double worst_bound,
                                        const std::string& path = "decode-mma-mixed") {
  auto checkpoint = open_tiny(options);
  auto bf16 = fp8_activation_runner(checkpoint, "bf16", path), fp8 = fp8_activation_runner(checkpoint, "fp8", path);
  expect_fp8_rows_within(what, "fp8 activations", *checkpoint, *bf16, *fp8, chunk, median_bound, worst_bound);
}

TEST(CudaRunnerFp8Activations, TinyModelLogitErrorAgainstBf16) {
  MOESERVE_REQUIRE_CUDA();
  expect_fp8_activation_logits_close("tiny model", TinyModelOptions{}, 5, 0.15, 1.0);
}

TEST(CudaRunnerFp8Activations, FullWidthTwoLayerLogitErrorAgainstBf16) {
  MOESERVE_REQUIRE_CUDA();
  expect_fp8_activation_logits_close("two-layer full width", full_width_two_layers(), 50, 0.08, 0.6);
}

TEST(CudaRunnerFp8Activations, GroupedGemmLogitErrorAgainstBf16) {
  MOESERVE_REQUIRE_CUDA();
  expect_fp8_activation_logits_close("tiny model, prefill-wgmma", TinyModelOptions{}, 5, 0.15, 1.0, "prefill-wgmma");
  expect_fp8_activation_logits_close("two-layer full width, prefill-wgmma", full_width_two_layers(), 50, 0.08, 0.6,
                                     "prefill-wgmma");
}

// FP8 dense projections (CudaRunnerOptions::dense_fp8_min_rows): the QKV and output projections' bf16 weights
// quantised at load into 128 x 128 blocks, their inputs per token per 128 columns, on cuBLASLt's block-scaled
// product, on the full-width model (hidden 2,880 and 4,096 query columns, shapes cuBLASLt takes). Every step takes
// them (min 1 token): batched steps of 241 tokens (padded to 244 for cuBLASLt) and chunks of 50 (52). Against bf16
// activations, and against FP8 activations without them (so the FP8 projections ran: a refusal falls back to bf16
// silently, which the first GPU run showed as equal logits). Measured on an H100 (2026-12-07, 3c3eedc): median row
// 7.9e-2 against bf16 (3.4e-2 with FP8 experts alone), 8.4e-2 against FP8 experts alone, worst 0.43; the bounds are
// about twice those.
TEST(CudaRunnerFp8Activations, DenseFp8LogitErrorAgainstBf16) {
  MOESERVE_REQUIRE_CUDA();
  auto checkpoint = open_tiny(full_width_two_layers());
  const std::string path = "prefill-wgmma";
  auto bf16 = fp8_activation_runner(checkpoint, "bf16", path), fp8 = fp8_activation_runner(checkpoint, "fp8", path);
  auto dense = fp8_activation_runner(checkpoint, "fp8", path, 1);
  expect_fp8_rows_within("two-layer full width, dense FP8", "fp8 activations", *checkpoint, *bf16, *dense, 50, 0.16,
                         0.9);
  expect_fp8_rows_within("two-layer full width, dense FP8 against FP8 experts alone", "fp8 dense projections",
                         *checkpoint, *fp8, *dense, 50, 0.16, 0.9);
  // The QKV input quantised by the norm from its fp32 rows (the unfused path quantises them after a bf16 rounding)
  // and the product's rows in bf16 (CudaRunnerOptions::qkv_fp8_fused), and the output projection's input quantised
  // by the attention kernel (o_fp8_fused), against neither: inputs that round to the other e4m3 neighbour, and each
  // q, k, v value rounded once more (2^-9). On the random two-layer model any such change moves the logits about as
  // much as FP8 itself does (H100, 2f883af: QKV fused alone, median row 6.1e-2, worst 0.36; the output projection's
  // alone 4.8e-2, worst 0.36); the bounds are the dense path's.
  auto unfused = fp8_activation_runner(checkpoint, "fp8", path, 1, false, false);
  expect_fp8_rows_within("two-layer full width, fused FP8 QKV and output projection inputs against unfused",
                         "fp8 fused inputs", *checkpoint, *unfused, *dense, 50, 0.16, 0.9);
  // The output projection's input alone: quantised by the prefill attention kernel on the steps whose every token
  // is in prefill tiles, against the attention's bf16 rows quantised by a launch of their own.
  auto o_unfused = fp8_activation_runner(checkpoint, "fp8", path, 1, true, false);
  expect_fp8_rows_within("two-layer full width, FP8 output projection fused into attention", "fp8 o fused",
                         *checkpoint, *o_unfused, *dense, 50, 0.16, 0.9);
}

// The experts' second projection as bf16 rows (CudaRunnerOptions::expert_out_bf16) against fp32 rows, every step on
// the grouped GEMM (prefill-wgmma), bf16 activations, tiny and full-width models: each expert output is rounded once
// more (2^-9 relative at most) before the combine. Measured on an H100 (2026-12-07): median row 7.3e-3 / 8.8e-3
// (batched / chunked) and worst 0.33 / 0.41 on the tiny model, 3.6e-3 and 0.28 on the full-width one; the random
// models carry a rounding to a few rows' logits as they do the fp8 KV's. Bounds about twice those.
TEST(CudaRunnerExpertOutBf16, LogitsCloseToFp32Rows) {
  MOESERVE_REQUIRE_CUDA();
  for (const auto& [what, options, chunk] : {std::tuple{"tiny model", TinyModelOptions{}, 5},
                                             std::tuple{"two-layer full width", full_width_two_layers(), 50}}) {
    auto checkpoint = open_tiny(options);
    CudaRunnerOptions o;
    o.precision = "bf16";
    o.moe_path_table = "prefill-wgmma";
    o.expert_out_bf16 = false;
    auto fp32_rows = make_cuda_runner(checkpoint, o);
    o.expert_out_bf16 = true;
    auto bf16_rows = make_cuda_runner(checkpoint, o);
    expect_fp8_rows_within(what, "bf16 expert rows", *checkpoint, *fp32_rows, *bf16_rows, chunk, 2e-2, 0.9);
  }
}

TEST(CudaRunnerFp8Activations, RefusesWhatDoesNotFit) {
  MOESERVE_REQUIRE_CUDA();
  auto checkpoint = open_tiny();
  CudaRunnerOptions o;
  o.precision = "f32";
  o.activation_dtype = "fp8";
  EXPECT_THROW(make_cuda_runner(checkpoint, o), std::exception);  // f32 keeps f32 activations
  o.precision = "bf16";
  o.activation_dtype = "int8";
  EXPECT_THROW(make_cuda_runner(checkpoint, o), std::exception);
  o.activation_dtype = "fp8_e4m3";  // the alias
  EXPECT_NO_THROW(make_cuda_runner(checkpoint, o));
}

TEST(CudaRunnerFp8Kv, RefusesCacheTypesThatDoNotFit) {
  MOESERVE_REQUIRE_CUDA();
  auto checkpoint = open_tiny();
  EXPECT_THROW(cuda_runner(checkpoint, "f32", "fp8_e4m3"), std::exception);  // f32 keeps an f32 cache
  EXPECT_THROW(cuda_runner(checkpoint, "f32", "bf16"), std::exception);
  EXPECT_THROW(cuda_runner(checkpoint, "bf16", "fp8_e5m2"), std::exception);
  EXPECT_NO_THROW(cuda_runner(checkpoint, "bf16", "fp8"));  // vLLM's alias
  EXPECT_NO_THROW(cuda_runner(checkpoint, "f32", "auto"));
}

// No device needed: a mixed step's tokens go once each to a prefill tile (sequences of >= 16 tokens) or to a
// decode group (the others: runs of 16 / heads-per-KV tokens of one sequence), and with kNoPrefillTiles all to
// decode groups.
TEST(CudaStepMetadata, TokensSplitBetweenPrefillTilesAndDecodeGroups) {
  TinyModelOptions o;
  o.heads = 8;
  o.kv_heads = 2;  // 4 heads per KV head: decode groups of 4 tokens
  const ModelConfig config = tiny_model_config(o);
  const KvGroups groups = kv_groups_of(config);
  const KvCacheLayout kv{16, 64};
  const std::vector<int32_t> table{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const std::vector<int> lengths = {1, 70, 9, 16, 15};
  std::vector<std::vector<int32_t>> ids;
  for (int n : lengths) ids.emplace_back(n, 3);
  ForwardBatch batch;
  for (const auto& t : ids) {
    SequenceStep step;
    step.tokens = t;
    step.start_position = 20;
    step.block_tables.assign(groups.num_groups(), table);
    batch.sequences.push_back(step);
  }
  cuda::StepMetadata meta;
  for (int prefill_min_rows : {cuda::kPrefillAttentionRows, cuda::kNoPrefillTiles}) {
    meta.build(batch, config, groups, kv, 0, 0, 0, prefill_min_rows);
    const cuda::StepView view = meta.view(meta.host().data());  // host pointers: the layout is the same
    std::vector<int> covered(view.num_tokens, 0);
    for (int i = 0; i < view.num_q_tiles; ++i) {
      const int s = view.q_tile_seq[i];
      EXPECT_GE(view.seq_q_len[s], prefill_min_rows) << "tile " << i;
      for (int r = view.q_tile_row0[i]; r < std::min(view.q_tile_row0[i] + cuda::kPrefillTileRows, view.seq_q_len[s]); ++r)
        ++covered[view.seq_q_start[s] + r];
    }
    for (int i = 0; i < view.num_decode_groups; ++i) {
      const int t0 = view.decode_token0[i], s = view.token_seq[t0];
      if (prefill_min_rows > 0) {
        EXPECT_LT(view.seq_q_len[s], prefill_min_rows) << "decode group " << i;
      }
      EXPECT_EQ((t0 - view.seq_q_start[s]) % cuda::decode_group_tokens(config.heads_per_kv()), 0) << "group " << i;
      const int end = std::min(t0 + cuda::decode_group_tokens(config.heads_per_kv()), view.seq_q_start[s] + view.seq_q_len[s]);
      for (int t = t0; t < end; ++t) ++covered[t];
    }
    EXPECT_EQ(covered, std::vector<int>(view.num_tokens, 1)) << "prefill_min_rows " << prefill_min_rows;
  }
  // 16 and 70 tokens get tiles (1 + 2), the others 1 + 3 + 4 decode groups of 4; without tiles 1 + 18 + 3 + 4 + 4.
  meta.build(batch, config, groups, kv, 0, 0, 0, cuda::kPrefillAttentionRows);
  EXPECT_EQ(meta.num_q_tiles(), 3);
  EXPECT_EQ(meta.num_decode_groups(), 8);
  meta.build(batch, config, groups, kv, 0, 0, 0, cuda::kNoPrefillTiles);
  EXPECT_EQ(meta.num_q_tiles(), 0);
  EXPECT_EQ(meta.num_decode_groups(), 30);
}

}  // namespace
}  // namespace moeserve
