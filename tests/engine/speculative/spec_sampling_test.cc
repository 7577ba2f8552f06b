// Lossless sampling: with temperature 1 and top-k 3 on the tiny model, the joint distribution of the first three
// generated tokens with speculation (a draft right only half of the time, so rejection and resampling matter)
// matches the target's exact distribution (spec_sampling_check.h), over 1,200 seeds.
#include <gtest/gtest.h>

#include "engine/speculative/spec_engine_harness.h"
#include "engine/speculative/spec_sampling_check.h"

namespace moeserve::speculative {
namespace {

TEST(SpecSampling, FirstTokensFollowTheTargetDistribution) {
  RequestSpec base;
  base.prompt = {5, 17, 300, 42, 9, 100, 7};
  base.max_tokens = 3;
  base.sampling.temperature = 1.0f;
  base.sampling.top_k = 3;
  base.speculation = DraftShape{2, 1, 0};
  auto exact_runner = testing::target_runner();
  auto runner = testing::target_runner();
  testing::expect_first_tokens_follow_target(*exact_runner, *runner,
                                             testing::spec_engine_config(testing::oracle_drafter(0.5), 4096, 4096),
                                             base, 1200);
}

}  // namespace
}  // namespace moeserve::speculative
