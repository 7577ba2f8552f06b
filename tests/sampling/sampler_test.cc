// Sampling: greedy, temperature, top-k, top-p, min-p, seeds; distributions checked by counting many draws.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 3.0f, -1.0f, 2.5f, 0.0f};

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double m = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - m) / temperature);
  for (auto& x : p) x /= sum;
  return p;
}

std::map<int32_t, int> draw(const SamplingParams& params, int n) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[sample_token(kLogits, params, i)];
  return counts;
}

// Pearson chi-square of observed counts against expected probabilities (over tokens with p > 0).
double chi_square(const std::map<int32_t, int>& counts, const std::vector<double>& p, int n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    double expected = p[i] * n;
    double observed = counts.contains(i) ? counts.at(i) : 0;
    chi += (observed - expected) * (observed - expected) / expected;
  }
  return chi;
}

TEST(Sampler, GreedyPicksTheArgmaxAndTheLowestIdOnTies) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(sample_token(kLogits, greedy, 0), 1);  // ids 1 and 4 tie at 3.0
  SamplingParams top1;
  top1.top_k = 1;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(kLogits, top1, i), 1);
}

TEST(Sampler, SameSeedSameTokensAndOtherSeedsDiffer) {
  SamplingParams a;
  a.seed = 42;
  std::vector<int32_t> first, second, other;
  for (int i = 0; i < 64; ++i) {
    first.push_back(sample_token(kLogits, a, i));
    second.push_back(sample_token(kLogits, a, i));
  }
  a.seed = 43;
  for (int i = 0; i < 64; ++i) other.push_back(sample_token(kLogits, a, i));
  EXPECT_EQ(first, second);
  EXPECT_NE(first, other);
}

TEST(Sampler, TemperatureSamplesTheSoftmax) {
  const int n = 40000;
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 7;
    // 7 degrees of freedom: the 99.9th percentile of chi-square is 24.3.
    EXPECT_LT(chi_square(draw(p, n), softmax(kLogits, temperature), n), 24.3) << "temperature " << temperature;
  }
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  SamplingParams p;
  p.top_k = 3;  // 3.0 (ids 1, 4) and 2.5 (id 6)
  auto counts = draw(p, 20000);
  EXPECT_EQ(counts.size(), 3u);
  for (auto [id, count] : counts) EXPECT_TRUE(id == 1 || id == 4 || id == 6) << id;
  std::vector<double> expected(kLogits.size(), 0.0);
  double z = 2 * std::exp(3.0) + std::exp(2.5);
  expected[1] = expected[4] = std::exp(3.0) / z;
  expected[6] = std::exp(2.5) / z;
  EXPECT_LT(chi_square(counts, expected, 20000), 13.8);  // 2 dof, 99.9%
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  auto p = softmax(kLogits, 1.0);
  // Sorted: ids 1, 4 (3.0), 6 (2.5), 2 (2.0), ... The first three hold p[1] + p[4] + p[6].
  SamplingParams params;
  params.top_p = static_cast<float>(p[1] + p[4] + p[6] - 1e-4);
  auto counts = draw(params, 20000);
  std::set<int32_t> support;
  for (auto [id, count] : counts) support.insert(id);
  EXPECT_EQ(support, (std::set<int32_t>{1, 4, 6}));
  params.top_p = static_cast<float>(p[1] + p[4] + p[6] + 1e-4);
  counts = draw(params, 20000);
  EXPECT_TRUE(counts.contains(2));
  EXPECT_FALSE(counts.contains(0));
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheLargest) {
  SamplingParams params;
  params.min_p = 0.5f;  // keeps p >= 0.5 * p_max: logits >= 3 - ln 2 = 2.307 -> ids 1, 4, 6
  auto counts = draw(params, 20000);
  std::set<int32_t> support;
  for (auto [id, count] : counts) support.insert(id);
  EXPECT_EQ(support, (std::set<int32_t>{1, 4, 6}));
}

TEST(Sampler, InvalidParametersAreNamed) {
  auto expect_error = [](SamplingParams p, const std::string& field) {
    try {
      validate_sampling_params(p);
      ADD_FAILURE() << field << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  SamplingParams p;
  p.temperature = -1;
  expect_error(p, "temperature");
  p = {};
  p.top_p = 0;
  expect_error(p, "top_p");
  p = {};
  p.top_k = -2;
  expect_error(p, "top_k");
  p = {};
  p.min_p = 1.5f;
  expect_error(p, "min_p");
  p = {};
  p.temperature = NAN;
  expect_error(p, "temperature");
}

}  // namespace
}  // namespace moeserve
