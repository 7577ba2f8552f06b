// The lossless-sampling check shared by the speculative tests of both model families: with temperature sampling,
// the joint distribution of the first three generated tokens with speculation matches the target's exact
// distribution, computed by enumerating every prefix. Pearson's chi-square goodness-of-fit over fixed seeds; it
// fails at significance level 0.001 (critical value from the Wilson-Hilferty approximation). Seeds are fixed, so
// the outcome is deterministic.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/engine_core.h"
#include "engine/engine_harness.h"
#include "sampling/sampler.h"

namespace moeserve::speculative::testing {

// Filtered, normalised next-token probabilities after `context` (at most 16 blocks of 8 per KV group).
inline std::map<int32_t, double> next_distribution(ModelRunner& runner, const std::vector<int32_t>& context,
                                                   const SamplingParams& params) {
  ForwardBatch batch;
  SequenceStep step;
  step.tokens = context;
  const int groups = kv_groups_of(runner.config()).num_groups();
  std::vector<std::vector<int32_t>> tables(groups);
  for (int g = 0; g < groups; ++g)
    for (int32_t i = 0; i < 16; ++i) tables[g].push_back(g * 16 + i);
  for (const auto& t : tables) step.block_tables.emplace_back(t);
  batch.sequences.push_back(step);
  ForwardOutput out;
  runner.forward(batch, out);
  const std::vector<double> weight = filtered_weights(out.logits, params);
  double total = 0;
  for (double w : weight) total += w;
  std::map<int32_t, double> p;
  for (size_t i = 0; i < weight.size(); ++i)
    if (weight[i] > 0) p[static_cast<int32_t>(i)] = weight[i] / total;
  return p;
}

// base (max_tokens 3, a speculation shape) run with seeds 0..seeds-1 through an engine over `runner` with `config`;
// exact_runner (a second runner of the same model, 64 blocks of 8 allocated here) gives the exact distribution.
inline void expect_first_tokens_follow_target(ModelRunner& exact_runner, ModelRunner& runner, EngineConfig config,
                                              const RequestSpec& base, int seeds) {
  exact_runner.allocate_kv_cache({8, 64});
  std::map<std::vector<int32_t>, double> exact;
  std::vector<int32_t> context = base.prompt;
  for (const auto& [t0, p0] : next_distribution(exact_runner, context, base.sampling)) {
    context.push_back(t0);
    for (const auto& [t1, p1] : next_distribution(exact_runner, context, base.sampling)) {
      context.push_back(t1);
      for (const auto& [t2, p2] : next_distribution(exact_runner, context, base.sampling)) exact[{t0, t1, t2}] = p0 * p1 * p2;
      context.pop_back();
    }
    context.pop_back();
  }

  EngineCore core(runner, std::move(config));
  std::vector<moeserve::testing::Arrival> arrivals;
  for (int seed = 0; seed < seeds; ++seed) {
    moeserve::testing::Arrival a{0, base};
    a.spec.sampling.seed = static_cast<uint64_t>(seed);
    arrivals.push_back(a);
  }
  const auto got = moeserve::testing::run_requests(core, arrivals);
  std::map<std::vector<int32_t>, int> observed;
  for (const auto& [id, c] : got) ++observed[c.tokens];
  const EngineMetrics m = core.metrics();
  EXPECT_GT(m.spec_accepted_tokens, 0u);
  EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);

  // Cells with an expected count under 5 are pooled into one.
  double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
  int cells = 0;
  for (const auto& [tokens, p] : exact) {
    const double expected = p * seeds;
    const double seen = observed.contains(tokens) ? observed.at(tokens) : 0;
    if (expected < 5) {
      pooled_expected += expected;
      pooled_observed += seen;
      continue;
    }
    chi2 += (seen - expected) * (seen - expected) / expected;
    ++cells;
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  int never = 0;
  for (const auto& [tokens, count] : observed) never += exact.contains(tokens) ? 0 : count;
  EXPECT_EQ(never, 0) << "outputs outside the top-k support";
  const double df = cells - 1;
  const double z = 3.090;  // upper 0.001 quantile of the standard normal
  const double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, critical) << "chi-square " << chi2 << " over " << cells << " cells";
  std::printf("chi-square %.2f, %d cells, critical value at 0.001: %.2f\n", chi2, cells, critical);
}

}  // namespace moeserve::speculative::testing
