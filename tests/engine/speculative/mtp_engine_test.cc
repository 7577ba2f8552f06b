// DeepSeek's MTP head inside the engine on the tiny DeepSeek-V3 model: greedy outputs with its chains and trees
// equal the target's own, token for token, in mixed batches (speculating and plain requests), with chunked prefill
// and under preemption; and sampled first tokens follow the target's exact distribution.
#include <gtest/gtest.h>

#include <random>

#include "deepseek_test_util.h"
#include "engine/engine_harness.h"
#include "engine/speculative/spec_engine_harness.h"
#include "engine/speculative/spec_sampling_check.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "runner/cpu/mtp_drafter.h"
#include "runner/eagle3_tree.h"

namespace moeserve::speculative {
namespace {

std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint() { return moeserve::testing::small_deepseek_checkpoint(); }

std::unique_ptr<DeepseekV3CpuRunner> runner() { return std::make_unique<DeepseekV3CpuRunner>(checkpoint(), 2); }

std::shared_ptr<Drafter> mtp() { return std::make_shared<MtpDrafter>(checkpoint(), MtpDrafterOptions{8, 1024, 2}); }

EngineMetrics expect_lossless(int64_t kv_blocks) {
  auto target = runner();
  auto reference = runner();
  return testing::expect_lossless(*target, *reference, mtp(), kv_blocks, testing::mixed_arrivals(11, 1024));
}

TEST(MtpEngine, GreedyOutputsEqualTheTargetsInMixedBatches) {
  const EngineMetrics m = expect_lossless(1024);
  EXPECT_GT(m.spec_draft_tokens, 0u);
}

TEST(MtpEngine, GreedyOutputsEqualTheTargetsUnderPreemption) {
  // 16 blocks of 8 tokens for 10 requests of up to 94 tokens: sequences are preempted and recomputed, and the
  // drafter restarts them from position 0.
  EXPECT_GT(expect_lossless(16).preemptions, 0u);
}

// The k most likely next tokens after `context`, with the residual streams after the last layer (the MTP's
// features) of every position.
std::vector<int32_t> top_tokens(ModelRunner& target, const std::vector<int32_t>& context, int k,
                                std::vector<float>& features) {
  target.allocate_kv_cache({8, 16});
  const std::vector<std::vector<int32_t>> table{{0, 1, 2, 3, 4, 5, 6, 7}};
  ForwardBatch batch;
  SequenceStep step;
  step.tokens = context;
  step.block_tables.emplace_back(table[0]);
  batch.sequences.push_back(step);
  batch.capture_layers = {target.config().num_layers - 1};
  ForwardOutput out;
  target.forward(batch, out);
  features = out.captured[0];
  return top_k_ids(out.logits, k);
}

// A prompt after which, for one of the 3 likeliest first tokens, the MTP head's first draft is among the target's
// 3 likeliest next tokens: with top-k 3 sampling, drafts from a random head are then sometimes accepted and
// sometimes rejected, so both paths of rejection sampling are taken.
std::vector<int32_t> prompt_with_plausible_drafts() {
  auto target = runner();
  std::mt19937 rng(3);
  for (int attempt = 0; attempt < 2000; ++attempt) {
    std::vector<int32_t> prompt(7);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 1024);
    // The engine's first draft: the MTP over the prompt's positions, the last fed the sampled first token t0,
    // proposes the token after t0.
    std::vector<float> features, unused;
    for (int32_t t0 : top_tokens(*target, prompt, 3, features)) {
      std::vector<int32_t> context = prompt;
      context.push_back(t0);
      const std::vector<int32_t> next_top = top_tokens(*target, context, 3, unused);
      MtpDrafter drafter(checkpoint(), MtpDrafterOptions{8, 4, 1});
      DraftInput in;
      in.start_token = context[0];
      in.features = features;
      const std::vector<int32_t> next(context.begin() + 1, context.end());
      in.next_tokens = next;
      const std::vector<float> logits = drafter.extend_logits(std::span(&in, 1));
      const int32_t draft = top_k_ids(std::span(logits).last(1024), 1)[0];
      if (std::find(next_top.begin(), next_top.end(), draft) != next_top.end()) return prompt;
    }
  }
  ADD_FAILURE() << "no prompt with a plausible draft";
  return {};
}

TEST(MtpEngine, SampledFirstTokensFollowTheTargetDistribution) {
  RequestSpec base;
  base.prompt = prompt_with_plausible_drafts();
  base.max_tokens = 3;
  base.sampling.temperature = 1.0f;
  base.sampling.top_k = 3;
  base.speculation = testing::chain(2);
  auto exact = runner();
  auto target = runner();
  testing::expect_first_tokens_follow_target(*exact, *target, testing::spec_engine_config(mtp(), 4096, 4096), base,
                                             1200);
}

}  // namespace
}  // namespace moeserve::speculative
