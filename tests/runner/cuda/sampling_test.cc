// GPU sampling (sampling.cu) against the CPU sampler (sampling/sampler.cc): on fresh random logits rows of several
// shapes (spread, peaked, heavy ties and near-ties, -inf entries, flat, and tiny logits whose distinct values share
// a weight), for every combination of temperature 0.3 / 1 / 2, top-k 0 / 1 / 50 / vocab, top-p 0.1 / 0.9 / 1 and
// min-p 0 / 0.05, with greedy rows mixed into every batch as the runner mixes them (argmax for all, the sampling
// kernel over the others), the GPU's token equals sample_token's for every row. sampling.cu's header says why the
// two could differ only when a draw lands within ~1e-11 relative of a cumulative boundary; no such case is
// expected among these draws, and none is allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "runner/cuda/sampling.h"
#include "sampling/sampler.h"
#include "sampling/sampling_uniform.h"
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

// ---- Small batches: greedy and temperature-only rows over a cluster of blocks (sampling_cluster_blocks) -----------

// Batches the rule sends to clusters: 1, 2 and the largest (132 on an H200).
std::vector<int> cluster_batches() {
  int largest = 1;
  while (cuda::sampling_cluster_blocks(largest + 1) > 1) ++largest;
  return {1, 2, largest};
}

// The tokens of `rows` rows (logits: rows x V) as the runner makes them, argmax over every row then the sampling
// kernel over the rows that sample, with `blocks` blocks a row (0: the rule's choice for this batch).
std::vector<int32_t> gpu_tokens(const std::vector<float>& logits, int V, const std::vector<SamplingParams>& params,
                                const std::vector<uint64_t>& sample_index, int blocks) {
  const int rows = static_cast<int>(params.size());
  std::vector<cuda::SampleRow> sampling;
  for (int r = 0; r < rows; ++r)
    if (!params[r].greedy()) sampling.push_back({r, sample_index[r], params[r]});
  DeviceBuffer logits_d = cuda::to_device(logits), rows_d(std::max<size_t>(sampling.size(), 1) * sizeof(cuda::SampleRow)),
               tokens(rows * 4);
  MOESERVE_CUDA_CHECK(cudaMemcpy(rows_d.get(), sampling.data(), sampling.size() * sizeof(cuda::SampleRow),
                                 cudaMemcpyHostToDevice));
  const int n = static_cast<int>(sampling.size());
  if (blocks == 0) {
    cuda::launch_argmax(nullptr, logits_d.as<float>(), rows, V, tokens.as<int32_t>());
    cuda::launch_sample(nullptr, logits_d.as<float>(), V, rows_d.as<cuda::SampleRow>(), n, tokens.as<int32_t>());
  } else {
    cuda::launch_argmax_split(nullptr, logits_d.as<float>(), rows, V, tokens.as<int32_t>(), blocks);
    cuda::launch_sample_split(nullptr, logits_d.as<float>(), V, rows_d.as<cuda::SampleRow>(), n, tokens.as<int32_t>(),
                              blocks);
  }
  return cuda::to_host<int32_t>(tokens.get(), rows);
}

std::vector<int32_t> cpu_tokens(const std::vector<float>& logits, int V, const std::vector<SamplingParams>& params,
                                const std::vector<uint64_t>& sample_index) {
  std::vector<int32_t> tokens(params.size());
  ThreadPool pool;
  pool.parallel_for(params.size(), 1, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r)
      tokens[r] = sample_token({logits.data() + r * V, static_cast<size_t>(V)}, params[r], sample_index[r]);
  });
  return tokens;
}

// The rule's path (clusters), the one-block path and the CPU sampler give the same tokens.
void expect_paths_agree(const std::string& what, const std::vector<float>& logits, int V,
                        const std::vector<SamplingParams>& params, const std::vector<uint64_t>& sample_index) {
  const auto expected = cpu_tokens(logits, V, params, sample_index);
  EXPECT_EQ(gpu_tokens(logits, V, params, sample_index, 0), expected) << what << ": the rule's path against the CPU";
  EXPECT_EQ(gpu_tokens(logits, V, params, sample_index, 1), expected) << what << ": one block a row against the CPU";
}

SamplingParams temperature_only(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature, p.seed = seed;
  return p;
}

// Every cluster batch size at vocabularies of 1, 1000 (a few ids a block), 100,003 (not a multiple of 4: rows
// misaligned for float4) and GPT-OSS's: rows of every shape, once all greedy and once all sampling at temperature
// 0.3, 1 and 2.
TEST(CudaSamplingCluster, GreedyAndTemperatureRowsMatchCpuSampler) {
  MOESERVE_REQUIRE_CUDA();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 21u);
  std::uniform_int_distribution<uint64_t> any;
  for (int V : {1, 1000, 100003, kFullVocab})
    for (int rows : cluster_batches()) {
      std::vector<float> logits;
      for (int r = 0; r < rows; ++r) {
        const auto row = logits_row(kShapes[r % std::size(kShapes)], rng, V);
        logits.insert(logits.end(), row.begin(), row.end());
      }
      std::vector<SamplingParams> greedy(rows), sampling;
      std::vector<uint64_t> index;
      for (int r = 0; r < rows; ++r) {
        greedy[r].temperature = 0.0f;
        sampling.push_back(temperature_only(std::array{0.3f, 1.0f, 2.0f}[r % 3], any(rng)));
        index.push_back(any(rng) % 100000);
      }
      const std::string what = "V " + std::to_string(V) + " rows " + std::to_string(rows);
      expect_paths_agree(what + " greedy", logits, V, greedy, index);
      expect_paths_agree(what + " temperature", logits, V, sampling, index);
    }
}

// Rows built to hit the edges of the cluster path, at batch 1 and 2 (greedy and temperature rows mixed):
// equal maxima in different blocks' ranges (the lowest id wins), an all -inf row (greedy: id 0), a single finite
// logit at the last id, and a flat row drawn with u close to 1, so that the crossing lands in the last block.
TEST(CudaSamplingCluster, TiesInfinitiesAndCrossingInTheLastBlock) {
  MOESERVE_REQUIRE_CUDA();
  const int V = kFullVocab;
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 22u);
  auto tied = testing::random_floats(rng, V, 0.0f, 3.0f);
  tied[V - 1] = tied[V / 2 + 3] = tied[12570] = 40.0f;  // in the last, a middle and the second block's range
  std::vector<float> all_inf(V, -inf), last_only(V, -inf), flat(V, 0.5f);
  last_only[V - 1] = -3.0f;
  uint64_t late = 0;  // a draw u > 0.99: the crossing lies past 99% of the row, in the last of up to 16 blocks
  while (sampling_uniform(5, late) <= 0.99) ++late;
  ASSERT_GT(sampling_uniform(5, late), 0.99);

  auto row_pair = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> both(a);
    both.insert(both.end(), b.begin(), b.end());
    return both;
  };
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (float temperature : {0.5f, 1.0f}) {
    const SamplingParams t = temperature_only(temperature, 5);
    expect_paths_agree("ties at the max", tied, V, {greedy}, {0});
    expect_paths_agree("ties at the max, sampled", tied, V, {t}, {late});
    expect_paths_agree("all -inf, greedy", all_inf, V, {greedy}, {0});
    expect_paths_agree("one finite logit at the last id", last_only, V, {t}, {3});
    expect_paths_agree("one finite logit at the last id, greedy", last_only, V, {greedy}, {0});
    expect_paths_agree("flat row, crossing in the last block", flat, V, {t}, {late});
    expect_paths_agree("tied and flat rows", row_pair(tied, flat), V, {greedy, t}, {0, late});
    expect_paths_agree("last-only and tied rows", row_pair(last_only, tied), V, {t, greedy}, {late, 0});
  }
  EXPECT_EQ(gpu_tokens(tied, V, {greedy}, {0}, 0), std::vector<int32_t>{12570});
  EXPECT_EQ(gpu_tokens(all_inf, V, {greedy}, {0}, 0), std::vector<int32_t>{0});
  EXPECT_EQ(gpu_tokens(last_only, V, {temperature_only(1.0f, 5)}, {3}, 0), std::vector<int32_t>{V - 1});
  const auto flat_token = gpu_tokens(flat, V, {temperature_only(1.0f, 5)}, {late}, 0);
  EXPECT_GT(flat_token[0], V * 99 / 100);
}

// Every cluster size the device holds gives the one-block path's tokens, on every run (fixed-order reductions),
// for a batch of 4 with greedy rows, temperature rows and a top-p row (which a cluster runs on one block).
TEST(CudaSamplingCluster, EveryClusterSizeMatchesOneBlockAndRepeats) {
  MOESERVE_REQUIRE_CUDA();
  const int V = kFullVocab;
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed() + 23u);
  std::vector<float> logits;
  for (Shape shape : {Shape::spread, Shape::peaked, Shape::ties, Shape::neg_inf}) {
    const auto row = logits_row(shape, rng, V);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  SamplingParams greedy, top_p = temperature_only(0.8f, 99);
  greedy.temperature = 0.0f;
  top_p.top_p = 0.9f;
  std::uniform_int_distribution<uint64_t> any;
  for (int trial = 0; trial < 8; ++trial) {
    const std::vector<SamplingParams> params = {temperature_only(1.0f, any(rng)), greedy, top_p,
                                                temperature_only(0.7f, any(rng))};
    const std::vector<uint64_t> index = {any(rng) % 1000, 0, any(rng) % 1000, any(rng) % 1000};
    const auto one_block = gpu_tokens(logits, V, params, index, 1);
    EXPECT_EQ(one_block, cpu_tokens(logits, V, params, index)) << "trial " << trial;
    for (int blocks = 2; blocks <= 16; blocks *= 2) {
      if (cuda::sampling_resident_clusters(blocks) == 0) continue;  // a size the device does not hold
      for (int run = 0; run < 3; ++run)
        EXPECT_EQ(gpu_tokens(logits, V, params, index, blocks), one_block)
            << "trial " << trial << " blocks " << blocks << " run " << run;
    }
  }
}

}  // namespace
}  // namespace moeserve
