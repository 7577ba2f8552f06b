// For the tests of a model split over ranks against one rank: a forward step, and logits compared within fp32
// reduction rounding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runner/runner.h"

namespace moeserve::testing {

inline ForwardOutput run_step(ModelRunner& runner, const ForwardBatch& batch) {
  ForwardOutput out;
  runner.forward(batch, out);
  return out;
}

// The largest |split - single| against 2e-5 of the largest |logit|: sums in another order through a few layers
// measured at most 1e-6 of the largest logit (a few ulps), so the bound leaves 20 times that, while a rank's
// missing or doubled share (a bias, an expert, the shared expert) moves logits by units.
inline void expect_split_logits_close(const std::vector<float>& split, const std::vector<float>& single,
                                      const std::string& what) {
  ASSERT_EQ(split.size(), single.size()) << what;
  float diff = 0.0f, scale = 0.0f;
  for (size_t i = 0; i < split.size(); ++i) {
    diff = std::max(diff, std::abs(split[i] - single[i]));
    scale = std::max(scale, std::abs(single[i]));
  }
  EXPECT_GT(scale, 0.0f) << what;
  EXPECT_LE(diff, 2e-5f * scale + 1e-5f) << what << ": logits differ by " << diff << " (largest " << scale << ")";
}

}  // namespace moeserve::testing
