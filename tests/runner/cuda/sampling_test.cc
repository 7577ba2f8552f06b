// GPU sampling (sampling.cu) against the CPU sampler (sampling/sampler.cc): on fresh random logits rows of several
// shapes (spread, peaked, heavy ties and near-ties, -inf entries, flat, and tiny logits whose distinct values share
// a weight), for every combination of temperature 0.3 / 1 / 2, top-k 0 / 1 / 50 / vocab, top-p 0.1 / 0.9 / 1 and
// min-p 0 / 0.05, with greedy rows mixed into every batch as the runner mixes them (argmax for all, the sampling
// kernel over the others), the GPU's token equals sample_token's for every row. sampling.cu's header says why the
// two could differ only when a draw lands within ~1e-11 relative of a cumulative boundary; no such case is
// expected among these draws, and none is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "sampling/sampler.h"
#include "util/thread_pool.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;

constexpr int kFullVocab = 201088;  // GPT-OSS's o200k_harmony vocabulary
constexpr int kBatch = 256;         // the runner's largest decode batch

enum class Shape { spread, peaked, ties, neg_inf, flat, tiny };
constexpr Shape kShapes[] = {Shape::spread, Shape::peaked, Shape::ties, Shape::neg_inf, Shape::flat, Shape::tiny};
const char* shape_name(Shape s) {
  switch (s) {
    case Shape::spread: return "spread";
    case Shape::peaked: return "peaked";
    case Shape::ties: return "ties";
    case Shape::neg_inf: return "neg_inf";
    case Shape::flat: return "flat";
    case Shape::tiny: return "tiny";
  }
  return "";
}

std::vector<float> logits_row(Shape shape, std::mt19937& rng, int V) {
  std::vector<float> row;
  switch (shape) {
    case Shape::spread:  // a model's spread of logits
      row = testing::random_floats(rng, V, 0.0f, 3.0f);
      break;
    case Shape::peaked: {  // one dominant token, a few runners-up, a long tail
      row = testing::random_floats(rng, V, -5.0f, 2.0f);
      std::uniform_int_distribution<int> id(0, V - 1);
      row[id(rng)] = 25.0f;
      for (int j = 0; j < 8; ++j) row[id(rng)] = 20.0f + j * 0.5f;
      break;
    }
    case Shape::ties: {  // values on a 0.25 grid (exact ties everywhere, at the max too) and near-ties next to them
      row = testing::random_floats(rng, V, 0.0f, 2.0f);
      std::uniform_int_distribution<int> coin(0, 3);
      for (float& x : row) {
        x = std::round(x * 4.0f) / 4.0f;
        if (coin(rng) == 0) x = std::nextafter(x, coin(rng) < 2 ? 100.0f : -100.0f);
      }
      break;
    }
    case Shape::neg_inf: {  // a fifth of the vocabulary masked
      row = testing::random_floats(rng, V, 0.0f, 3.0f);
      std::uniform_int_distribution<int> fifth(0, 4);
      for (float& x : row)
        if (fifth(rng) == 0) x = -std::numeric_limits<float>::infinity();
      row[V / 2] = 1.0f;  // at least one finite logit
      break;
    }
    case Shape::flat:  // nearly uniform
      row = testing::random_floats(rng, V, 0.0f, 0.02f);
      break;
    case Shape::tiny:  // |x - max| / T below ~1e-8: exp rounds distinct differences to the same weight
      row = testing::random_floats(rng, V, 0.0f, 1e-9f);
      break;
  }
  return row;
}

struct Case {
  size_t base;  // index of the logits row
  SamplingParams params;
  uint64_t sample_index;
};

// Every case through the GPU in batches of kBatch rows, as the runner does: argmax over every row, then the
// sampling kernel over the rows that sample. Returns the cases whose token differs from sample_token's.
int count_mismatches(const std::vector<std::vector<float>>& bases, const std::vector<Shape>& shapes,
                     const std::vector<Case>& cases, int V) {
  std::vector<int32_t> expected(cases.size());
  ThreadPool pool;
  pool.parallel_for(cases.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      expected[i] = sample_token(bases[cases[i].base], cases[i].params, cases[i].sample_index);
  });
  DeviceBuffer logits(static_cast<size_t>(kBatch) * V * 4), sample_rows(kBatch * sizeof(cuda::SampleRow)),
      tokens(kBatch * 4);
  int mismatches = 0;
  for (size_t first = 0; first < cases.size(); first += kBatch) {
    const int rows = static_cast<int>(std::min<size_t>(kBatch, cases.size() - first));
    std::vector<cuda::SampleRow> sampling;
    for (int r = 0; r < rows; ++r) {
      const Case& c = cases[first + r];
      MOESERVE_CUDA_CHECK(cudaMemcpy(logits.as<float>() + static_cast<size_t>(r) * V, bases[c.base].data(),
                                     static_cast<size_t>(V) * 4, cudaMemcpyHostToDevice));
      if (!c.params.greedy()) sampling.push_back({r, c.sample_index, c.params});
    }
    MOESERVE_CUDA_CHECK(cudaMemcpy(sample_rows.get(), sampling.data(), sampling.size() * sizeof(cuda::SampleRow),
                                   cudaMemcpyHostToDevice));
    cuda::launch_argmax(nullptr, logits.as<float>(), rows, V, tokens.as<int32_t>());
    cuda::launch_sample(nullptr, logits.as<float>(), V, sample_rows.as<cuda::SampleRow>(),
                        static_cast<int>(sampling.size()), tokens.as<int32_t>());
    const auto got = cuda::to_host<int32_t>(tokens.get(), rows);
    for (int r = 0; r < rows; ++r) {
      const Case& c = cases[first + r];
      if (got[r] == expected[first + r]) continue;
      ++mismatches;
      ADD_FAILURE() << shape_name(shapes[c.base]) << " row " << c.base << " T " << c.params.temperature << " top_k " << c.params.top_k << " top_p "
                    << c.params.top_p << " min_p " << c.params.min_p << " seed " << c.params.seed << " index "
                    << c.sample_index << ": GPU " << got[r] << ", CPU " << expected[first + r];
    }
  }
  return mismatches;
}

// Every filter combination on every base row, `draws` seeds each, and a greedy row after every 8 sampling rows.
std::vector<Case> filter_grid(size_t bases, int V, int draws, std::mt19937& rng) {
  std::vector<Case> cases;
  std::uniform_int_distribution<uint64_t> any;
  for (size_t base = 0; base < bases; ++base)
    for (float temperature : {0.3f, 1.0f, 2.0f})
      for (int top_k : {0, 1, 50, V})
        for (float top_p : {0.1f, 0.9f, 1.0f})
          for (float min_p : {0.0f, 0.05f})
            for (int d = 0; d < draws; ++d) {
              SamplingParams p;
              p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.seed = any(rng);
              cases.push_back({base, p, any(rng) % 100000});
              if (cases.size() % 9 == 8) {
                SamplingParams greedy = p;
                greedy.temperature = 0.0f;
                cases.push_back({base, greedy, 0});
              }
            }
  return cases;
}

void check_vocabulary(int V, int rows_per_shape, int draws) {
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + static_cast<unsigned>(V));
  std::vector<std::vector<float>> bases;
  std::vector<Shape> shapes;
  for (Shape shape : kShapes)
    for (int i = 0; i < rows_per_shape; ++i) bases.push_back(logits_row(shape, rng, V)), shapes.push_back(shape);
  const std::vector<Case> cases = filter_grid(bases.size(), V, draws, rng);
  const int mismatches = count_mismatches(bases, shapes, cases, V);
  std::printf("sampling V %d: %zu rows (%zu logits rows of %zu shapes), %d differ from sample_token\n", V,
              cases.size(), bases.size(), std::size(kShapes), mismatches);
  EXPECT_EQ(mismatches, 0);
}

TEST(CudaSampling, FullVocabularyEveryFilterMatchesCpuSampler) {
  MOESERVE_REQUIRE_CUDA();
  check_vocabulary(kFullVocab, 2, 2);
}

// Vocabularies that are not a multiple of the float4 loads, smaller than one chunk, and a few chunks long.
TEST(CudaSampling, SmallVocabulariesMatchCpuSampler) {
  MOESERVE_REQUIRE_CUDA();
  for (int V : {7, 1003, 4099}) check_vocabulary(V, 1, 2);
}

// A few rows at the full vocabulary (short enough for compute-sanitizer).
TEST(CudaSampling, FullVocabularyFewRowsMatchCpuSampler) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 3u);
  std::vector<std::vector<float>> bases;
  const std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  for (Shape shape : shapes) bases.push_back(logits_row(shape, rng, kFullVocab));
  std::vector<Case> cases;
  for (size_t base = 0; base < bases.size(); ++base) {
    SamplingParams p;
    p.temperature = 0.7f, p.top_k = 50, p.top_p = 0.9f, p.min_p = 0.05f, p.seed = 17 + base;
    cases.push_back({base, p, 5});
    p.top_k = 0;
    cases.push_back({base, p, 6});
    p.top_p = 1.0f, p.min_p = 0.0f;
    cases.push_back({base, p, 7});
  }
  EXPECT_EQ(count_mismatches(bases, shapes, cases, kFullVocab), 0);
}

}  // namespace
}  // namespace moeserve
