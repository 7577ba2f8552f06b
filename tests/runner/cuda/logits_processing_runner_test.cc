// The CUDA runner's logits processing and logprobs against the CPU runner's, through forward(): in one step, a
// greedy row with a logit_bias that forces its token, a sampled row under an allowed-token mask of 64 tokens, and
// a prompt scored row by row (prompt logprobs) whose last row draws; every row with top-5 logprobs. fp32, where
// the two runners' logits agree to 1e-4: the same tokens, logprobs within 1e-3, the same top tokens. Skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.h"
#include "sampling/logits_processing.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/sequence_step.h"
#include "runner_compare.h"
#include "test_util.h"

namespace moeserve {
namespace {

TEST(CudaRunnerLogitsProcessing, EditsMasksAndLogprobsMatchTheCpuRunner) {
  MOESERVE_REQUIRE_CUDA();
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner cpu(checkpoint, 0);
  CudaRunnerOptions options;
  options.precision = "f32";
  auto gpu = make_cuda_runner(checkpoint, options);
  const int V = checkpoint->config().vocab_size;
  const int groups = kv_groups_of(checkpoint->config()).num_groups();
  const KvCacheLayout layout{16, 64};
  cpu.allocate_kv_cache(layout);
  gpu->allocate_kv_cache(layout);

  std::vector<std::vector<int32_t>> prompts = {testing::prompt(20, 1, V), testing::prompt(9, 2, V),
                                               testing::prompt(17, 3, V)};
  std::vector<std::vector<std::vector<int32_t>>> tables(3, std::vector<std::vector<int32_t>>(groups));
  for (int s = 0; s < 3; ++s)
    for (int g = 0; g < groups; ++g)
      for (int b = 0; b < 2; ++b) tables[s][g].push_back((s * groups + g) * 2 + b);

  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams sampled;
  sampled.seed = 99;
  const std::vector<LogitEdit> force = {{4242, 100.0f, 1.0f, 0.0f}};
  std::vector<uint32_t> mask((V + 31) / 32, 0);
  std::mt19937 rng(4);
  for (int i = 0; i < 64; ++i) {
    const int32_t t = std::uniform_int_distribution<int32_t>(0, V - 1)(rng);
    mask[t / 32] |= 1u << (t % 32);
  }
  std::vector<int32_t> scored(prompts[2].begin() + 1, prompts[2].end());
  scored.push_back(-1);  // the last row draws

  ForwardBatch batch;
  batch.return_logits = false;
  for (int s = 0; s < 3; ++s) {
    SequenceStep step = testing::sequence_step(prompts[s], 0, tables[s], s == 2 ? static_cast<int32_t>(prompts[s].size()) : 1);
    step.top_logprobs = 5;
    step.sampling = s == 0 ? &greedy : &sampled;
    if (s == 0) step.logit_edits = force;
    if (s == 1) step.allowed_tokens = mask;
    if (s == 2) step.logprob_tokens = scored;
    batch.sequences.push_back(step);
  }
  ForwardOutput want, got;
  cpu.forward(batch, want);
  gpu->forward(batch, got);
  ASSERT_EQ(got.rows, want.rows);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  EXPECT_EQ(got.sampled, want.sampled);
  EXPECT_EQ(want.sampled[0], 4242);
  EXPECT_TRUE((mask[want.sampled[1] / 32] >> (want.sampled[1] % 32)) & 1u);
  for (int64_t r = 0; r < want.rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    EXPECT_EQ(got.logprobs[r].chosen.token, want.logprobs[r].chosen.token);
    EXPECT_NEAR(got.logprobs[r].chosen.logprob, want.logprobs[r].chosen.logprob, 1e-3);
    ASSERT_EQ(got.logprobs[r].top.size(), 5u);
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(got.logprobs[r].top[j].token, want.logprobs[r].top[j].token) << j;
      EXPECT_NEAR(got.logprobs[r].top[j].logprob, want.logprobs[r].top[j].logprob, 1e-3) << j;
    }
  }
}

}  // namespace
}  // namespace moeserve
