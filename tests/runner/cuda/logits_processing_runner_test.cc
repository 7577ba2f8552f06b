// The CUDA runner's logits processing and logprobs against the CPU runner's, through forward(): in one step, a
// greedy row with a logit_bias that forces its token, a sampled row under an allowed-token mask of 64 tokens, and
// a prompt scored row by row (prompt logprobs) whose last row draws; every row with top-5 logprobs. fp32, where
// the two runners' logits agree to 1e-4: the same tokens, logprobs within 1e-3, the same top tokens. Skips
// without a CUDA device.
#include <gtest/gtest.h>

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

  testing::ProcessedRowsStep step(V, groups, 2, 4242);
  ForwardOutput want, got;
  cpu.forward(step.batch, want);
  gpu->forward(step.batch, got);
  testing::expect_logprobs_match(got, want);
  EXPECT_EQ(want.sampled[0], 4242);
  EXPECT_TRUE((step.mask[want.sampled[1] / 32] >> (want.sampled[1] % 32)) & 1u);
}

}  // namespace
}  // namespace moeserve
