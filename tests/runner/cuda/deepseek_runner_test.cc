// The DeepSeek-V3 CUDA runner (deepseek_cuda_runner.h) against the CPU reference runner on the tiny DeepSeek model
// (vocabulary 1,024; every feature of the architecture, FP8 weights with partial blocks), and its routed-expert
// kernel (deepseek_experts.cu) against the CPU op on fresh random inputs at the tiles' edges.
//
// Logits, every row of: a batch of three prompts of different lengths in one step, the same prompts in chunks over
// other blocks (runner_compare.h's run_prompts), and two schedules of prefill, mixed (decode tokens beside prefill
// chunks) and decode steps over three sequences; greedy continuations of 32 tokens. On the bf16 path the prefill's
// expanded form (mla_prefill.h) takes, by mla_layout.h's rule at the tiny model's widths (48 times the cached rows
// against the (query, key) pairs): the batched prompts (not their chunks of 5: graph-shaped steps stay absorbed),
// and in the schedules the whole prompts and a chunk of 64 after 16 cached tokens, beside decode tokens, a chunk of
// 4 after 5 and one of 23 after 17 (absorbed). The bf16 cases run with the expanded form (the default; the f32
// path keeps the absorbed form), and one bf16 case with every token absorbed (bf16_mla_prefill_absorbed): all
// against the CPU, to the bounds below.
// Bounds, per logits row on ||gpu - cpu|| / ||cpu||:
// - f32 (fp32 activations and latent cache, every FP8 projection W8A32 on CUDA cores, as the CPU computes): the
//   CPU's arithmetic in another order, fp32 rounding through three layers: every row within 1e-4 (the GPT-OSS
//   runner's f32 bound), and greedy continuations token for token.
// - bf16 (the FP8 path: bf16 activations, DeepSeek's act_quant into cuBLASLt's FP8 projections, a bf16 or fp8
//   latent cache): act_quant rounds each input of the attention and dense projections to e4m3, an error uniform
//   within half an ulp (2^-4 relative at most), 2.6e-2 rms; with weights independent of the rounding a
//   projection's output moves by that rms fraction of itself (deepseek_ops_test's Fp8BlockLinearMatchesCpu bound).
//   A layer's residual delta carries the error of the quantised projections in series on its paths: q_a, q_b and
//   o in the attention (kv_a beside them), gate/up and down in the MLP or shared expert, about sqrt(5) x 2.6e-2 =
//   5.8e-2; three layers compound to about sqrt(3) x 5.8e-2 = 1.0e-1 of the residual stream, which the final norm
//   and the bf16 lm_head pass to the logits. bf16 rounding of activations and latents adds ~2e-3 an op, an fp8
//   latent cache 2.6e-2 on the attention's keys and values. The median row is held to 0.15 (1.5 x the estimate;
//   measured on an H100, 2026-12-06: 0.080 for the prompts, 0.102 for the prefill / mixed / decode schedule, 0.098
//   with the fp8 cache; an earlier estimate of 6.4e-2 counted two projections in series and failed at 0.1); a token
//   whose router choice lies within that error of a tie may take another expert and move by tens of percent, so the
//   worst row and the rows above 5e-2 are reported only.
// - bf16 with the routed experts on version 2 (bf16_experts_v2: deepseek_experts_wgmma.cu, act_quant on the routed
//   experts' inputs too, W8A8): the estimate above already counts the FFN's gate/up and down quantised in series;
//   version 1 keeps the routed experts W8A16 (part of why the measured figures sit under the estimate), version 2
//   quantises them as the shared expert's are, which the estimate assumes: the same 0.15 holds its median row.
//   Greedy continuations of version 2 are not held to version 1's (DeepseekCudaRunnerExpertsV2): the two differ by
//   act_quant's rounding of the experts' inputs, a few percent of the logits, more than the gap between the tiny
//   random model's top two logits at many positions (why the bf16 path's are not held to the CPU's either).
// - expanded against absorbed (DeepseekCudaRunnerMlaPrefill, the same prompts and schedules with the switch each
//   way, bf16): the forms differ only in the attention's bf16 roundings (mla_prefill_test.cc's 2.4e-2 bound on the
//   expanded heads' outputs, the absorbed form's within mla_decode_test.cc's), but each act_quant downstream turns a
//   small change of its input into whole e4m3 steps for the values it moves across a rounding boundary, so past the
//   first projection the two runs' FP8 roundings are as good as independent: each within 0.15 of the CPU at the
//   median row, their difference within sqrt(2) x 0.15 = 0.21. Logits equal bit for bit would mean the switch never
//   reached the kernels.
// Expert kernel (version 1; version 2 in deepseek_experts_wgmma_test.cc), per grouped row against cpu::linear
// (+ cpu::silu_mul) over the same weights and inputs: fp32 sums of at most 272 products in another order, 1e-5
// relative; bf16 SwiGLU output adds its rounding, 2^-9 of each value: 2.5e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "cuda_test_util.h"
#include "deepseek_test_util.h"
#include "engine/generate.h"
#include "random_fp8_weight.h"
#include "runner/cpu/deepseek_v3_ops.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/cpu/ops.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/moe_buffers.h"
#include "runner_compare.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::Precision;
using testing::one_sequence_step;
using testing::prompt;

// A runner configuration: CudaRunnerOptions' precision, KV cache type, routed experts' kernel and prefill form
// (pinned, so that MOESERVE_DEEPSEEK_EXPERTS and MOESERVE_DEEPSEEK_MLA_PREFILL do not change what a case runs).
struct RunnerCase {
  std::string precision, kv_cache_dtype, experts = "v1", mla_prefill = "expanded";
  std::string name() const {
    return precision + (kv_cache_dtype == "auto" ? "" : "_kv_" + kv_cache_dtype) +
           (experts == "v1" ? "" : "_experts_" + experts) +
           (mla_prefill == "expanded" ? "" : "_mla_prefill_" + mla_prefill);
  }
};

std::unique_ptr<ModelRunner> deepseek_gpu_runner(const RunnerCase& c) {
  CudaRunnerOptions options;
  options.precision = c.precision;
  options.kv_cache_dtype = c.kv_cache_dtype;
  options.deepseek_experts = c.experts;
  options.deepseek_mla_prefill = c.mla_prefill;
  return make_deepseek_cuda_runner(testing::small_deepseek_checkpoint(), options);
}

// Greedy continuations of 32 tokens, prompts taken 16 tokens a step.
GenerateOptions greedy_options() {
  GenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.max_tokens = 32;
  options.prefill_chunk = 16;
  return options;
}

// Tokens of `got` equal to `want` before the first that differs.
size_t equal_prefix(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t same = 0;
  while (same < std::min(got.size(), want.size()) && got[same] == want[same]) ++same;
  return same;
}

class DeepseekCudaRunnerTest : public ::testing::TestWithParam<RunnerCase> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::unique_ptr<ModelRunner> gpu_runner() const { return deepseek_gpu_runner(GetParam()); }
  bool f32() const { return GetParam().precision == "f32"; }

  void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) const {
    const int vocab = testing::small_deepseek_checkpoint()->config().vocab_size;
    ASSERT_EQ(got.size(), want.size()) << what;
    const testing::RowErrors e = testing::row_errors(got, want, vocab);
    std::printf("%s %s: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", what.c_str(),
                GetParam().name().c_str(), e.rows, e.median, e.worst, e.above_5e2);
    if (f32())
      testing::expect_error_within(what + " worst row f32", e.worst, 1e-4);
    else
      testing::expect_error_within(what + " median row " + GetParam().name(), e.median, 0.15);
  }
};

TEST_P(DeepseekCudaRunnerTest, PromptLogitsMatchCpuRunner) {
  DeepseekV3CpuRunner cpu(testing::small_deepseek_checkpoint(), 0);
  auto gpu = gpu_runner();
  const int vocab = cpu.config().vocab_size;
  // Three lengths in one step (a block of 8 crossed many times), then chunks of 5 over other blocks.
  const std::vector<std::vector<int32_t>> prompts = {prompt(37, 1, vocab), prompt(9, 2, vocab), prompt(21, 3, vocab)};
  const testing::AllLogits want = testing::run_prompts(cpu, prompts, 5), got = testing::run_prompts(*gpu, prompts, 5);
  expect_close("prompts batched", got.batched, want.batched);
  expect_close("prompts chunked", got.chunked, want.chunked);
}

// Three sequences' lengths and the steps that consume them: per step, tokens per sequence (0: not in the step).
struct Schedule {
  std::vector<int> lengths;
  std::vector<std::vector<int>> steps;
};
// Prefill of two lengths, a mixed step (a decode token, a chunk's end, a new prompt's first chunk), a mixed step
// with a long chunk, then decode steps.
const Schedule kMixedSchedule{
    {30, 15, 45}, {{23, 5, 0}, {1, 4, 17}, {1, 1, 23}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}};
// Two whole prompts, then a chunk of 64 after the first one's 16 cached tokens beside the second one's decode token
// and a third whole prompt (expanded, absorbed, expanded: the absorbed token between the expanded runs), then
// decode steps.
const Schedule kCachedContextSchedule{{82, 23, 42}, {{16, 20, 0}, {64, 1, 40}, {1, 1, 1}, {1, 1, 1}}};

// The schedule's steps (prefill chunks, single decode tokens, both in one step) over blocks scattered in the pool,
// every token's logits returned.
std::vector<float> run_schedule(ModelRunner& runner, const Schedule& schedule) {
  const int vocab = runner.config().vocab_size, block_size = 16;
  std::vector<std::vector<int32_t>> tokens;
  int blocks = 0;
  for (size_t s = 0; s < schedule.lengths.size(); ++s) {
    tokens.push_back(prompt(schedule.lengths[s], 11 + static_cast<int>(s), vocab));
    blocks += (schedule.lengths[s] + block_size - 1) / block_size;
  }
  std::vector<std::vector<int32_t>> tables(tokens.size());
  int32_t next_block = 0;
  std::vector<int32_t> pool(blocks + 1);  // one block never used
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  for (size_t s = 0; s < tokens.size(); ++s)
    for (size_t b = 0; b * block_size < tokens[s].size(); ++b) tables[s].push_back(pool[next_block++]);
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(pool.size())});
  std::vector<int> done(tokens.size(), 0);
  std::vector<float> logits;
  for (const std::vector<int>& counts : schedule.steps) {
    ForwardBatch batch;
    for (size_t s = 0; s < tokens.size(); ++s) {
      if (counts[s] == 0) continue;
      SequenceStep step;
      step.tokens = std::span(tokens[s]).subspan(done[s], counts[s]);
      step.start_position = done[s];
      step.block_tables = {tables[s]};
      step.num_logits = counts[s];
      batch.sequences.push_back(step);
      done[s] += counts[s];
    }
    ForwardOutput out;
    runner.forward(batch, out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
  }
  for (size_t s = 0; s < tokens.size(); ++s) EXPECT_EQ(done[s], static_cast<int>(tokens[s].size())) << s;
  return logits;
}

TEST_P(DeepseekCudaRunnerTest, PrefillMixedAndDecodeStepsMatchCpuRunner) {
  DeepseekV3CpuRunner cpu(testing::small_deepseek_checkpoint(), 0);
  auto gpu = gpu_runner();
  expect_close("prefill, mixed and decode steps", run_schedule(*gpu, kMixedSchedule),
               run_schedule(cpu, kMixedSchedule));
}

TEST_P(DeepseekCudaRunnerTest, ChunkAfterCachedContextMatchesCpuRunner) {
  DeepseekV3CpuRunner cpu(testing::small_deepseek_checkpoint(), 0);
  auto gpu = gpu_runner();
  expect_close("a chunk after cached context", run_schedule(*gpu, kCachedContextSchedule),
               run_schedule(cpu, kCachedContextSchedule));
}

TEST_P(DeepseekCudaRunnerTest, GreedyContinuationsMatchCpuRunner) {
  DeepseekV3CpuRunner cpu(testing::small_deepseek_checkpoint(), 0);
  auto gpu = gpu_runner();
  const GenerateOptions options = greedy_options();
  for (int salt : {1, 2, 3}) {
    const auto p = prompt(20 + 7 * salt, salt, cpu.config().vocab_size);
    const auto want = generate_sequence(cpu, p, options).tokens;
    const auto got = generate_sequence(*gpu, p, options).tokens;
    std::printf("greedy %s prompt %d: %zu of %zu tokens equal\n", GetParam().name().c_str(), salt,
                equal_prefix(got, want), want.size());
    // f32 agrees token for token; on the FP8 path the tiny random model's top two logits are often closer than
    // the path's error, so an early divergence is expected there and only reported.
    if (f32()) {
      EXPECT_EQ(got, want) << "prompt " << salt;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, DeepseekCudaRunnerTest,
                         ::testing::Values(RunnerCase{"f32", "auto"}, RunnerCase{"bf16", "auto"},
                                           RunnerCase{"bf16", "fp8_e4m3"}, RunnerCase{"bf16", "auto", "v2"},
                                           RunnerCase{"bf16", "auto", "v1", "absorbed"}),
                         [](const ::testing::TestParamInfo<RunnerCase>& info) { return info.param.name(); });

// The routed experts' version 2 beside version 1 on the bf16 path (the bound against the CPU runner is the
// bf16_experts_v2 case's above). Version 2 rounds the experts' inputs to e4m3 where version 1 keeps them bf16, so
// logits equal bit for bit would mean the option never reached the kernels; greedy continuations are reported
// only (see the header comment for why they are not held equal).
TEST(DeepseekCudaRunnerExpertsV2, DiffersFromVersion1AndReportsGreedyAgreement) {
  MOESERVE_REQUIRE_CUDA();
  auto v1 = deepseek_gpu_runner({"bf16", "auto", "v1"}), v2 = deepseek_gpu_runner({"bf16", "auto", "v2"});
  const int vocab = v1->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {prompt(37, 1, vocab), prompt(9, 2, vocab)};
  const std::vector<float> logits_v1 = testing::run_prompts(*v1, prompts, 5).batched,
                           logits_v2 = testing::run_prompts(*v2, prompts, 5).batched;
  ASSERT_EQ(logits_v2.size(), logits_v1.size());
  EXPECT_NE(logits_v2, logits_v1) << "version 2's logits equal version 1's: was version 2 run?";
  const testing::RowErrors e = testing::row_errors(logits_v2, logits_v1, vocab);
  std::printf("logits v2 against v1: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", e.rows, e.median,
              e.worst, e.above_5e2);
  const GenerateOptions options = greedy_options();
  for (int salt : {1, 2, 3}) {
    const auto p = prompt(20 + 7 * salt, salt, vocab);
    const auto want = generate_sequence(*v1, p, options).tokens;
    const auto got = generate_sequence(*v2, p, options).tokens;
    std::printf("greedy v2 against v1 prompt %d: %zu of %zu tokens equal\n", salt, equal_prefix(got, want),
                want.size());
  }
}

// The prefill's two forms beside each other on the bf16 path (the bound: see the header comment), over the batched
// prompts and the cached-context schedule, whose expanded sequences are listed in the header comment.
TEST(DeepseekCudaRunnerMlaPrefill, ExpandedMatchesAbsorbed) {
  MOESERVE_REQUIRE_CUDA();
  auto expanded = deepseek_gpu_runner({"bf16", "auto", "v1", "expanded"});
  auto absorbed = deepseek_gpu_runner({"bf16", "auto", "v1", "absorbed"});
  const int vocab = expanded->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {prompt(37, 1, vocab), prompt(9, 2, vocab), prompt(21, 3, vocab)};
  auto logits = [&](ModelRunner& runner) {
    std::vector<float> all = testing::run_prompts(runner, prompts, 5).batched;
    const std::vector<float> steps = run_schedule(runner, kCachedContextSchedule);
    all.insert(all.end(), steps.begin(), steps.end());
    return all;
  };
  const std::vector<float> got = logits(*expanded), want = logits(*absorbed);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_NE(got, want) << "the expanded form's logits equal the absorbed form's: was it run?";
  const testing::RowErrors e = testing::row_errors(got, want, vocab);
  std::printf("logits expanded against absorbed: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", e.rows,
              e.median, e.worst, e.above_5e2);
  testing::expect_error_within("expanded against absorbed median row", e.median, 0.21);
}

// The runner's two-way switches take their two values (or empty, for MOESERVE_DEEPSEEK_GRAPHS and
// MOESERVE_DEEPSEEK_MLA_PREFILL); another is refused before any device is touched.
TEST(DeepseekCudaRunnerOptions, RefuseAnotherSwitchValue) {
  const std::pair<std::string CudaRunnerOptions::*, const char*> switches[] = {
      {&CudaRunnerOptions::deepseek_graphs, "deepseek_graphs \"yes\": on or off"},
      {&CudaRunnerOptions::deepseek_mla_prefill, "deepseek_mla_prefill \"yes\": expanded or absorbed"}};
  for (const auto& [field, message] : switches) {
    CudaRunnerOptions options;
    options.*field = "yes";
    try {
      make_deepseek_cuda_runner(testing::small_deepseek_checkpoint(), options);
      ADD_FAILURE() << message << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// ---- the routed-expert kernel ------------------------------------------------------------------------------------

class DeepseekCudaRunnerExperts : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 1719u};
};

// The worst row's ||out - ref|| / ||ref|| over rows of width n.
double worst_row_error(const std::vector<float>& out, const std::vector<float>& ref, int64_t n) {
  double worst = 0.0;
  for (size_t r = 0; (r + 1) * n <= ref.size(); ++r) {
    const std::vector<float> a(out.begin() + r * n, out.begin() + (r + 1) * n),
        b(ref.begin() + r * n, ref.begin() + (r + 1) * n);
    worst = std::max(worst, testing::relative_error(a, b));
  }
  return worst;
}

// Rows per expert 1, 15, 16, 17, 33 and 0 (around the 16-row tile), top-2: expert intermediate 208 (a partial
// second band of 128 outputs, a partial scale row block, and the down projection's last K block of 80 columns; the
// kernel takes K in multiples of 16), hidden 272 (a last K block of 16 columns).
TEST_F(DeepseekCudaRunnerExperts, GroupedExpertsMatchCpuAtTileEdges) {
  constexpr int E = 6, k = 2, T = 41;
  constexpr int64_t I = 208, H = 272;
  const testing::RandomFp8Experts gate(rng_, E, I, H), up(rng_, E, I, H), down(rng_, E, H, I);
  // The pairs sorted by expert, token t taking pairs t and t + T: distinct experts, counts {1, 15, 16, 17, 33, 0}.
  std::vector<int32_t> sorted;
  for (auto [e, n] : {std::pair{0, 1}, std::pair{1, 15}, std::pair{2, 16}, std::pair{3, 17}, std::pair{4, 33}}) sorted.insert(sorted.end(), n, e);
  ASSERT_EQ(sorted.size(), static_cast<size_t>(T * k));
  std::vector<int32_t> experts(T * k), counts(E, 0);
  for (int t = 0; t < T; ++t) {
    experts[t * k] = sorted[t];
    experts[t * k + 1] = sorted[t + T];
    ++counts[sorted[t]];
    ++counts[sorted[t + T]];
  }
  cuda::MoeBuffers buffers;
  buffers.grow(T, k, E);
  const cuda::MoeRouting routing = buffers.routing();
  DeviceBuffer experts_d = cuda::to_device(experts);
  MOESERVE_CUDA_CHECK(cudaMemcpy(routing.expert_counts, counts.data(), E * 4, cudaMemcpyHostToDevice));
  cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, cuda::kDeepseekExpertTileRows, routing);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> slot_row = cuda::to_host<int32_t>(routing.slot_row, T * k);

  ThreadPool pool(0);
  for (Precision type : {Precision::f32, Precision::bf16}) {
    const std::vector<float> x = testing::round_to(type, testing::random_floats(rng_, T * H));
    DeviceBuffer x_d = testing::upload_as(type, x), act_d(T * k * I * 4), y_d(T * k * H * 4);
    cuda::DeepseekExpertParams p;
    p.w = gate.device;
    p.up = up.device;
    p.x = x_d.get();
    p.x_type = type;
    p.x_row = routing.row_token;
    p.out = act_d.get();
    p.out_type = type;
    p.rows = T * k;
    p.routing = routing;
    cuda::launch_deepseek_experts(nullptr, p, cuda::DeepseekExpertsVersion::v1);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> act = testing::download_as(type, act_d.get(), T * k * I);
    // Down, on the device's own intermediates (so each projection is checked alone).
    cuda::DeepseekExpertParams q = p;
    q.w = down.device;
    q.up = {};
    q.x = act_d.get();
    q.x_row = nullptr;
    q.out = y_d.get();
    q.out_type = Precision::f32;
    cuda::launch_deepseek_experts(nullptr, q, cuda::DeepseekExpertsVersion::v1);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> y = cuda::to_host<float>(y_d.get(), T * k * H);

    std::vector<float> act_got, act_want, y_got, y_want;
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = experts[t * k + j], row = slot_row[t * k + j];
        std::vector<float> g(I), u(I), o(H);
        cpu::linear(pool, x.data() + t * H, 1, gate.weights[e].linear, g.data());
        cpu::linear(pool, x.data() + t * H, 1, up.weights[e].linear, u.data());
        cpu::silu_mul(g.data(), u.data(), I);
        act_want.insert(act_want.end(), g.begin(), g.end());
        act_got.insert(act_got.end(), act.begin() + row * I, act.begin() + (row + 1) * I);
        cpu::linear(pool, act.data() + row * I, 1, down.weights[e].linear, o.data());
        y_want.insert(y_want.end(), o.begin(), o.end());
        y_got.insert(y_got.end(), y.begin() + row * H, y.begin() + (row + 1) * H);
      }
    const std::string name = testing::precision_name(type);
    // bf16: the SwiGLU outputs are rounded to bf16, at most 2^-8 of each value (half an ulp of an 8-bit significand),
    // so no row's relative error can pass 2^-8 from that; 2.5e-3 was exceeded on an H200 (2.84e-3, worst of 82 rows).
    testing::expect_error_within("experts gate/up + SwiGLU " + name, worst_row_error(act_got, act_want, I),
                                 type == Precision::f32 ? 1e-5 : 0x1p-8);
    testing::expect_error_within("experts down " + name, worst_row_error(y_got, y_want, H), 1e-5);
  }

  // One matrix over rows in order (the f32 path's dense FP8 projections): 37 rows, a partial last tile.
  const testing::RandomFp8Experts dense(rng_, 1, I, H);
  const std::vector<float> x = testing::random_floats(rng_, 37 * H);
  DeviceBuffer x_d = cuda::to_device(x), y_d(37 * I * 4);
  cuda::DeepseekExpertParams p;
  p.w = dense.device;
  p.x = x_d.get();
  p.out = y_d.get();
  p.rows = 37;
  cuda::launch_deepseek_experts(nullptr, p, cuda::DeepseekExpertsVersion::v1);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> want(37 * I);
  cpu::linear(pool, x.data(), 37, dense.weights[0].linear, want.data());
  testing::expect_error_within("dense FP8 projection f32", worst_row_error(cuda::to_host<float>(y_d.get(), want.size()),
                                                                           want, I),
                               1e-5);
}

// DeepSeek-R1's widths (128 heads, latent 512, 256 experts, hidden 7,168) at two layers (one dense, one MoE; about
// 16 GB), random FP8 weights made on the device: a prefill step and two decode steps run, every logit finite.
TEST(DeepseekCudaRunnerSynthetic, TwoLayersOfR1RunPrefillAndDecode) {
  MOESERVE_REQUIRE_CUDA();
  auto runner = make_synthetic_deepseek_cuda_runner("deepseek-r1", 2, 1, {});
  const int vocab = runner->config().vocab_size;
  runner->allocate_kv_cache({16, 8});
  std::vector<int32_t> tokens = prompt(40, 5, vocab);
  const std::vector<int32_t> table = {3, 1, 6, 0};
  int done = 0;
  for (int count : {37, 1, 2}) {
    ForwardOutput out;
    runner->forward(one_sequence_step(tokens, done, count, table), out);
    ASSERT_EQ(out.logits.size(), static_cast<size_t>(vocab));
    EXPECT_TRUE(std::all_of(out.logits.begin(), out.logits.end(), [](float v) { return std::isfinite(v); }))
        << "step of " << count << " tokens at " << done;
    done += count;
  }
}

}  // namespace
}  // namespace moeserve
