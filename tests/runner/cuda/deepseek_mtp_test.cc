// DeepSeek's MTP head on the GPU (deepseek_mtp_cuda_drafter.h) against the CPU head (runner/cpu/mtp_drafter.h, its
// reference) on the tiny DeepSeek model, both fed the same target states: the CPU runner's residual streams after
// its last layer over real token sequences. The head's chains as CUDA graphs against the same chains launched
// directly. And in the engine on the CUDA runner, greedy output with the GPU head speculating equals plain greedy
// decoding, with graphs and without. Every test skips without a CUDA device.
//
// Bounds (f32 path: fp32 activations and latents, every FP8 projection W8A32, as the CPU computes):
// - draft logits, per row ||gpu - cpu|| / ||cpu||: the CPU's arithmetic in another summation order. A dot product
//   of K random-signed terms summed in another order differs by about u sqrt(K / 2) of itself (u = 2^-24 = 6e-8):
//   at most 5.3e-7 for the MTP layer's widest inputs (q_b's q_lora_rank and o's 4 heads x 40, K = 160; the
//   absorption's kv_lora_rank 144, eh_proj's 128, the experts' 96; the dense MLP's 320 is not on this MoE layer).
//   The head puts about ten of them in series on the residual stream (eh_proj, q_a, q_b, kv_a, absorption and
//   un-absorption, o, router, gate/up, down) plus the attention's sums, four norms and the lm_head:
//   sqrt(12) x 5.3e-7 = 1.8e-6, so every row within 2e-5 (10x). The target runner's three layers measured 1.4e-6
//   against the CPU on an H100.
// - the chosen tokens are equal (a tie within 1e-5 of a logit's value is improbable among 1,024), and each depth's
//   log-probability of its token (log-softmax over logits of rms ~2, off by at most ~2e-5 x 4 x 2 = 1.6e-4 each
//   with the largest logits four times the rms) within 1e-3 a depth, cumulative.
// - bf16 path (bf16 activations and latents, act_quant into the FP8 projections): one MoE layer's quantised
//   projections in series, about sqrt(5) x 2.6e-2 = 5.8e-2 of the residual delta (deepseek_runner_test.cc's
//   per-layer estimate), bf16 rounding of eh_proj and the lm_head beside it: the median row within 0.1 (1.7x).
//   The target runs its defaults here (gpu_target pins only the graphs): the routed experts on version 2, whose
//   act_quant of the experts' inputs the five quantised projections already count, and the extend's attention over
//   a whole prompt in the expanded form (mla_prefill_test.cc's 2.4e-2 on the heads' outputs, before o; in quadrature
//   with 5.8e-2 about 6.3e-2, still within the bound). Measured 3.9e-2 on an H100 (binaries of 09cef2e) with
//   version 1 and the absorbed form, the defaults then.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "cuda_test_util.h"
#include "deepseek_test_util.h"
#include "engine/engine_harness.h"
#include "engine/speculative/spec_engine_harness.h"
#include "runner/cpu/mtp_drafter.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/deepseek_mtp_cuda_drafter.h"
#include "runner/mtp_inputs.h"
#include "runner_compare.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

constexpr double kF32LogitsBound = 2e-5;
constexpr double kScoreToleranceAtDepth = 1e-3;
constexpr double kBf16MedianBound = 0.1;

std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint() { return moeserve::testing::small_deepseek_checkpoint(); }

// Sequences run through the CPU target (the heads' features) and slices of them as inputs (mtp_inputs.h).
using Verified = moeserve::testing::VerifiedTokens;
Verified verified(int n, uint32_t seed) { return moeserve::testing::verified_tokens(checkpoint(), n, seed); }
DraftInput input(const Verified& v, uint64_t id, int start, int end, DraftShape shape) {
  return moeserve::testing::draft_input(v, checkpoint()->config().hidden_size, id, start, end, shape);
}

// The target's steps and the head's chains graphed or launched directly (pinned, so that MOESERVE_DEEPSEEK_GRAPHS
// does not change what a case runs).
std::unique_ptr<ModelRunner> gpu_target(const std::string& precision, bool graphs = false) {
  CudaRunnerOptions options;
  options.precision = precision;
  options.deepseek_graphs = graphs ? "on" : "off";
  return make_deepseek_cuda_runner(checkpoint(), options);
}

CudaDrafterOptions drafter_options(int64_t num_blocks, bool graphs = false) {
  CudaDrafterOptions options;
  options.block_size = 8;
  options.num_blocks = num_blocks;
  options.cuda_graphs = graphs;
  return options;
}

std::unique_ptr<cuda::DeepseekMtpCudaDrafter> gpu_drafter(ModelRunner& target, bool graphs = false) {
  auto& runner = dynamic_cast<cuda::DeepseekCudaRunner&>(target);
  return std::make_unique<cuda::DeepseekMtpCudaDrafter>(
      runner, cuda::DeepseekDeviceMtp::upload(*checkpoint(), runner.weights()), drafter_options(64, graphs));
}

std::unique_ptr<MtpDrafter> cpu_drafter() {
  return std::make_unique<MtpDrafter>(checkpoint(), MtpDrafterOptions{8, 64, 2});
}

// The logits of every position of three sequences (23, 9 and 31 positions, over blocks of 8) extended in one call.
moeserve::testing::RowErrors extend_errors(const std::string& precision) {
  const std::vector<Verified> v = {verified(23, 1), verified(9, 2), verified(31, 3)};
  const std::vector<DraftInput> inputs = {input(v[0], 1, 0, 23, {}), input(v[1], 2, 0, 9, {}),
                                          input(v[2], 3, 0, 31, {})};
  auto target = gpu_target(precision);
  const std::vector<float> got = gpu_drafter(*target)->extend_logits(inputs);
  const std::vector<float> want = cpu_drafter()->extend_logits(inputs);
  EXPECT_EQ(got.size(), want.size());
  const moeserve::testing::RowErrors e = moeserve::testing::row_errors(got, want, checkpoint()->config().vocab_size);
  std::printf("MTP extend logits %s: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", precision.c_str(), e.rows,
              e.median, e.worst, e.above_5e2);
  return e;
}

TEST(DeepseekMtpCudaDrafter, ExtendedLogitsMatchTheCpuHeadF32) {
  MOESERVE_REQUIRE_CUDA();
  moeserve::testing::expect_error_within("MTP extend logits f32, worst row", extend_errors("f32").worst,
                                         kF32LogitsBound);
}

TEST(DeepseekMtpCudaDrafter, ExtendedLogitsMatchTheCpuHeadBf16) {
  MOESERVE_REQUIRE_CUDA();
  moeserve::testing::expect_error_within("MTP extend logits bf16, median row", extend_errors("bf16").median,
                                         kBf16MedianBound);
}

// Positions [start, end) of a sequence given in one call, and what it asks to draft.
struct Range {
  int start, end;
  DraftShape shape;
};
using Calls = std::vector<std::vector<Range>>;  // per call, per sequence (ids 100, 101, ...)
struct ChainComparison {
  int nodes = 0;
  double worst_score_error = 0;
};

// Every call through both heads, with scores on the calls `scored` picks: chains and cached positions equal, each
// depth's cumulative score within kScoreToleranceAtDepth a depth.
template <typename WantHead, typename GotHead>
ChainComparison compare_chains(const std::vector<Verified>& v, const Calls& calls, WantHead& want_head,
                               GotHead& got_head, bool (*scored)(size_t call)) {
  ChainComparison result;
  for (size_t c = 0; c < calls.size(); ++c) {
    std::vector<DraftInput> inputs;
    for (size_t s = 0; s < calls[c].size(); ++s)
      inputs.push_back(input(v[s], 100 + s, calls[c][s].start, calls[c][s].end, calls[c][s].shape));
    std::vector<DraftTree> want, got;
    std::vector<std::vector<float>> want_scores, got_scores;
    if (scored(c)) {
      want_head.propose_scored(inputs, want, &want_scores);
      got_head.propose_scored(inputs, got, &got_scores);
    } else {
      want_head.propose(inputs, want);
      got_head.propose(inputs, got);
    }
    EXPECT_EQ(got.size(), want.size());
    for (size_t s = 0; s < std::min(got.size(), want.size()); ++s) {
      const std::string where = "call " + std::to_string(c) + " sequence " + std::to_string(s);
      EXPECT_EQ(got[s].tokens, want[s].tokens) << where;
      EXPECT_EQ(got[s].parent, want[s].parent) << where;
      EXPECT_EQ(got_head.cached_positions(inputs[s].sequence_id), want_head.cached_positions(inputs[s].sequence_id))
          << where;
      result.nodes += static_cast<int>(want[s].tokens.size());
      if (!scored(c)) continue;
      EXPECT_EQ(got_scores[s].size(), want_scores[s].size()) << where;
      for (size_t d = 0; d < std::min(got_scores[s].size(), want_scores[s].size()); ++d) {
        const double error = std::abs(static_cast<double>(got_scores[s][d]) - want_scores[s][d]);
        EXPECT_LE(error, kScoreToleranceAtDepth * static_cast<double>(d + 1)) << where << " depth " << d + 1;
        result.worst_score_error = std::max(result.worst_score_error, error);
      }
    }
  }
  return result;
}

// Three sequences through four calls: first calls of 5, 17 and 30 positions, extensions of 1, 2 and 3, a rollback
// of each to 4 positions before its end, one more position each; chains of 3 and 1, and a call that only extends
// one of them. Every call's chains, scores and cached positions equal the CPU head's (f32 path).
TEST(DeepseekMtpCudaDrafter, ChainsMatchTheCpuHeadF32) {
  MOESERVE_REQUIRE_CUDA();
  const std::vector<Verified> v = {verified(40, 4), verified(40, 5), verified(40, 6)};
  const DraftShape three{3, 1, 0}, one{1, 1, 0}, none{};
  const Calls calls = {{{0, 5, three}, {0, 17, one}, {0, 30, three}},
                       {{5, 6, three}, {17, 19, three}, {30, 33, none}},
                       {{2, 4, one}, {15, 16, three}, {29, 32, three}},
                       {{4, 5, three}, {16, 17, three}, {32, 33, one}}};
  auto target = gpu_target("f32");
  auto gpu = gpu_drafter(*target);
  auto cpu = cpu_drafter();
  const ChainComparison r = compare_chains(v, calls, *cpu, *gpu, [](size_t) { return true; });
  std::printf("MTP chains f32: %d draft nodes, worst cumulative score error %.3e\n", r.nodes, r.worst_score_error);
  EXPECT_GT(r.nodes, 0);
}

TEST(DeepseekMtpCudaDrafter, RefusesTrees) {
  MOESERVE_REQUIRE_CUDA();
  auto target = gpu_target("f32");
  auto gpu = gpu_drafter(*target);
  const Verified v = verified(6, 7);
  const DraftInput tree = input(v, 1, 0, 6, {3, 2, 5});
  std::vector<DraftTree> out;
  EXPECT_THROW(gpu->propose(std::span(&tree, 1), out), Error);
}

// The same calls through a head whose chains are CUDA graphs (beside a graphed target) and one launching them
// directly (beside a direct target): chains of 1 to 4 over 1 to 3 sequences (buckets 1, 2 and 4, a padding row
// among them), calls with scores and without (the head's two sets of graphs), contexts past 64 (the bf16 path's
// second context bucket), a rollback, shapes replayed. Tokens and cached positions equal, scores within the CPU
// comparison's bound (kScoreToleranceAtDepth a depth): both heads run the same kernels on the same padded rows and
// one context bucket per chain (deepseek_mtp_cuda_drafter.h), so they should in fact agree bit for bit.
class DeepseekMtpCudaDrafterGraphs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
};

TEST_P(DeepseekMtpCudaDrafterGraphs, ChainsEqualChainsWithoutGraphs) {
  const std::vector<Verified> v = {verified(100, 8), verified(100, 9), verified(100, 10)};
  const DraftShape one{1, 1, 0}, two{2, 1, 0}, three{3, 1, 0}, four{4, 1, 0}, none{};
  const Calls calls = {{{0, 5, three}, {0, 17, one}, {0, 30, three}},
                       {{5, 6, three}, {17, 19, three}, {30, 33, none}},
                       {{6, 40, two}, {19, 60, none}, {33, 70, four}},
                       {{40, 41, one}, {60, 61, three}, {70, 71, three}},
                       {{37, 39, three}, {61, 62, none}, {71, 72, none}},
                       {{39, 40, three}, {62, 63, three}, {72, 73, three}},
                       {{40, 41, three}, {63, 64, three}, {73, 74, three}}};
  auto graphed_target = gpu_target(GetParam(), true), direct_target = gpu_target(GetParam(), false);
  auto graphed = gpu_drafter(*graphed_target, true), direct = gpu_drafter(*direct_target, false);
  const ChainComparison r = compare_chains(v, calls, *direct, *graphed, [](size_t call) { return call % 2 == 0; });
  std::printf("MTP chains %s, graphed against direct: %d draft nodes, worst cumulative score error %.3e\n",
              GetParam().c_str(), r.nodes, r.worst_score_error);
  EXPECT_GT(r.nodes, 0);
  EXPECT_GT(graphed->captured_graphs(), 0u) << "no chain graph held: were the chains graphed?";
  EXPECT_EQ(direct->captured_graphs(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Precisions, DeepseekMtpCudaDrafterGraphs, ::testing::Values("f32", "bf16"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Greedy output with the GPU head speculating (chains of 3 and 1, beside plain requests, arriving over the first
// steps) on the f32 CUDA runner equals the runner's plain greedy decoding (direct launches), request by request:
// with the target's steps and the head's chains launched directly, then both graphed.
class DeepseekMtpCudaDrafterEngine : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
};

TEST_P(DeepseekMtpCudaDrafterEngine, GreedySpeculationEqualsPlainDecodingOnTheCudaRunner) {
  const bool graphs = GetParam();
  auto gpu = gpu_target("f32", graphs), reference = gpu_target("f32");
  std::shared_ptr<Drafter> drafter = make_cuda_mtp_drafter(checkpoint(), *gpu, drafter_options(1024, graphs));
  const std::vector<std::optional<DraftShape>> shapes = {testing::chain(3), std::nullopt, testing::chain(1)};
  std::vector<moeserve::testing::Arrival> requests(9);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].step = static_cast<int>(i / 2);
    requests[i].spec.prompt = moeserve::testing::prompt(3 + 8 * static_cast<int>(i), static_cast<int>(i), 1024);
    requests[i].spec.sampling.temperature = 0.0f;
    requests[i].spec.max_tokens = 12 + 3 * static_cast<int>(i);
    requests[i].spec.speculation = shapes[i % shapes.size()].value_or(DraftShape{});
  }
  const EngineMetrics m = testing::expect_lossless(*gpu, *reference, drafter, 1024, requests);
  // Random weights rarely draft the target's token; what must hold is that the engine drafted on the GPU (chains
  // longer than one token among them), verified, and gave every block back.
  EXPECT_GT(m.spec_drafts, 0u);
  EXPECT_GT(m.spec_draft_tokens, m.spec_drafts);
  EXPECT_EQ(m.kv_blocks_in_use, 0);
  const size_t head_graphs = dynamic_cast<cuda::DeepseekMtpCudaDrafter&>(*drafter).captured_graphs(),
               target_graphs = dynamic_cast<cuda::DeepseekCudaRunner&>(*gpu).captured_graphs();
  if (graphs) {
    EXPECT_GT(head_graphs, 0u) << "no chain graph held: were the chains graphed?";
  }
  std::printf("GPU MTP head in the engine (%s): %llu drafts, acceptance length %.3f, graphs held: %zu of the head, "
              "%zu of the target\n",
              graphs ? "graphs" : "direct", static_cast<unsigned long long>(m.spec_drafts), m.spec_acceptance_length(),
              head_graphs, target_graphs);
}

INSTANTIATE_TEST_SUITE_P(Launches, DeepseekMtpCudaDrafterEngine, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "graphs" : "direct"; });

}  // namespace
}  // namespace moeserve::speculative
