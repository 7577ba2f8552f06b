// The CUDA runner against the CPU runner: logits of the tiny model (a batch of prompts longer than the sliding
// window in one step, then the same prompts in chunks over scattered blocks), greedy and sampled continuations of
// 64 tokens, CUDA-graph decode against the same steps run directly, and a two-layer model of gpt-oss-20b's full
// width.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"
#include "engine/generate.h"
#include "model/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "test_util.h"

namespace moeserve {
namespace {

std::vector<int32_t> prompt(int length, int salt, int vocab) {
  std::vector<int32_t> tokens(length);
  for (int i = 0; i < length; ++i) tokens[i] = static_cast<int32_t>((1000003LL * (i + 1) * (salt + 7) + 17 * salt) % vocab);
  return tokens;
}

// Logits of every position of every prompt, in one batched step and then in chunks of `chunk` over other blocks.
struct AllLogits {
  std::vector<float> batched, chunked;
};

AllLogits run_prompts(ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts, int chunk) {
  const int groups = kv_groups_of(runner.config()).num_groups(), block_size = 8;
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  const int blocks_each = (longest + block_size - 1) / block_size;
  const int n = static_cast<int>(prompts.size());
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(n) * groups * blocks_each});
  auto tables_for = [&](uint32_t seed) {
    std::vector<int32_t> pool(n * groups * blocks_each);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
    std::vector<std::vector<std::vector<int32_t>>> tables(n, std::vector<std::vector<int32_t>>(groups));
    size_t next = 0;
    for (auto& seq : tables)
      for (auto& table : seq) table.assign(pool.begin() + next, pool.begin() + next + blocks_each), next += blocks_each;
    return tables;
  };
  auto spans = [](const std::vector<std::vector<int32_t>>& seq) {
    std::vector<std::span<const int32_t>> out;
    for (const auto& t : seq) out.emplace_back(t);
    return out;
  };
  AllLogits result;
  const auto tables = tables_for(3);
  ForwardBatch batch;
  for (int s = 0; s < n; ++s) {
    SequenceStep step;
    step.tokens = prompts[s];
    step.block_tables = spans(tables[s]);
    step.num_logits = static_cast<int32_t>(prompts[s].size());
    batch.sequences.push_back(step);
  }
  ForwardOutput out;
  runner.forward(batch, out);
  result.batched = out.logits;
  const auto other = tables_for(5);
  for (int s = 0; s < n; ++s)
    for (size_t begin = 0; begin < prompts[s].size(); begin += chunk) {
      const size_t end = std::min(prompts[s].size(), begin + chunk);
      ForwardBatch step_batch;
      SequenceStep step;
      step.tokens = std::span(prompts[s]).subspan(begin, end - begin);
      step.start_position = static_cast<int32_t>(begin);
      step.block_tables = spans(other[s]);
      step.num_logits = static_cast<int32_t>(end - begin);
      step_batch.sequences.push_back(step);
      runner.forward(step_batch, out);
      result.chunked.insert(result.chunked.end(), out.logits.begin(), out.logits.end());
    }
  return result;
}

// Per-row ||out - ref|| / ||ref|| of logits rows, summarised.
struct RowErrors {
  double worst = 0, median = 0;
  int rows = 0, above_5e2 = 0;
};

RowErrors row_errors(const std::vector<float>& out, const std::vector<float>& ref, int vocab) {
  EXPECT_EQ(out.size(), ref.size());
  std::vector<double> errors;
  for (size_t row = 0; (row + 1) * vocab <= std::min(out.size(), ref.size()); ++row) {
    std::vector<float> a(out.begin() + row * vocab, out.begin() + (row + 1) * vocab),
        b(ref.begin() + row * vocab, ref.begin() + (row + 1) * vocab);
    errors.push_back(testing::relative_error(a, b));
  }
  RowErrors e;
  e.rows = static_cast<int>(errors.size());
  if (errors.empty()) return e;
  std::sort(errors.begin(), errors.end());
  e.worst = errors.back();
  e.median = errors[errors.size() / 2];
  e.above_5e2 = static_cast<int>(std::count_if(errors.begin(), errors.end(), [](double x) { return x > 5e-2; }));
  return e;
}

// fp32: every row within 1e-4 (the CPU's arithmetic in another order). bf16: activations and KV are rounded at
// every layer (~2e-3 per operation, see the kernel tests), and a token whose 4th and 5th router logits lie
// closer than that may take another expert than on the CPU, which moves its row by tens of percent; so the
// median row is bounded, and the worst row and the count of rows off by more than 5% are reported.
void expect_logits_close(const std::string& what, const std::string& precision, const std::vector<float>& out,
                         const std::vector<float>& ref, int vocab) {
  const RowErrors e = row_errors(out, ref, vocab);
  std::printf("%s %s: %d rows, median %.3e, worst %.3e, %d rows above 5e-2\n", what.c_str(), precision.c_str(),
              e.rows, e.median, e.worst, e.above_5e2);
  if (precision == "f32") {
    testing::expect_error_within(what + " worst row f32", e.worst, 1e-4);
  } else {
    testing::expect_error_within(what + " median row bf16", e.median, 3e-2);
  }
}

class CudaRunnerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::unique_ptr<ModelRunner> cuda_runner(std::shared_ptr<const Checkpoint> checkpoint, bool graphs = true) {
    CudaRunnerOptions options;
    options.precision = GetParam();
    options.cuda_graphs = graphs;
    return make_cuda_runner(std::move(checkpoint), options);
  }
};

TEST_P(CudaRunnerTest, TinyModelLogitsMatchCpuRunner) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner cpu(checkpoint, 0);
  auto gpu = cuda_runner(checkpoint);
  const int vocab = checkpoint->config().vocab_size;
  // Longer than the tiny model's window (32) and than one 64-row prefill tile.
  const std::vector<std::vector<int32_t>> prompts = {prompt(70, 1, vocab), prompt(9, 2, vocab), prompt(33, 3, vocab)};
  const AllLogits expected = run_prompts(cpu, prompts, 5), got = run_prompts(*gpu, prompts, 5);
  expect_logits_close("tiny model logits batched", GetParam(), got.batched, expected.batched, vocab);
  expect_logits_close("tiny model logits chunked", GetParam(), got.chunked, expected.chunked, vocab);
}

// Continuations of 64 tokens from three prompts, the CPU runner's against the CUDA runner's.
void expect_continuations_match(ModelRunner& cpu, ModelRunner& gpu, const SamplingParams& sampling,
                                const std::string& what, const std::string& precision) {
  GenerateOptions options;
  options.sampling = sampling;
  options.max_tokens = 64;
  options.prefill_chunk = 16;
  for (int salt : {1, 2, 3}) {
    const auto p = prompt(20 + 7 * salt, salt, cpu.config().vocab_size);
    const auto expected = generate_sequence(cpu, p, options).tokens;
    const auto got = generate_sequence(gpu, p, options).tokens;
    size_t same = 0;
    while (same < std::min(got.size(), expected.size()) && got[same] == expected[same]) ++same;
    std::printf("%s %s prompt %d: %zu of %zu tokens equal\n", what.c_str(), precision.c_str(), salt, same,
                expected.size());
    // fp32 must agree token for token. bf16 logits differ by ~1e-2 relative, and the tiny random model's top two
    // logits are often closer than that (and a sampled draw moves with its weights), so there an early divergence
    // is expected and only reported.
    if (precision == "f32") {
      EXPECT_EQ(got, expected) << what << " prompt " << salt;
    }
  }
}

TEST_P(CudaRunnerTest, GreedyAndSampledContinuationsMatchCpuRunner) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  CpuRunner cpu(checkpoint, 0);
  auto gpu = cuda_runner(checkpoint);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  expect_continuations_match(cpu, *gpu, greedy, "greedy", GetParam());
  // Sampling runs on the GPU (sampling.cu) and must draw what the CPU runner's sampler draws.
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.95f;
  sampled.seed = 20240611;
  expect_continuations_match(cpu, *gpu, sampled, "sampled", GetParam());
}

TEST_P(CudaRunnerTest, GraphDecodeMatchesDirectDecode) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  auto with_graphs = cuda_runner(checkpoint, true), direct = cuda_runner(checkpoint, false);
  const int vocab = checkpoint->config().vocab_size;
  for (auto* runner : {with_graphs.get(), direct.get()}) runner->allocate_kv_cache({16, 64});
  // Three sequences (graph bucket 4: one padding sequence), 40 decode steps each (past the window).
  std::vector<std::vector<std::vector<int32_t>>> tables(3, std::vector<std::vector<int32_t>>(2));
  for (int s = 0; s < 3; ++s)
    for (int g = 0; g < 2; ++g)
      for (int b = 0; b < 4; ++b) tables[s][g].push_back(s * 8 + g * 4 + b);
  std::vector<float> logits[2];
  for (int r = 0; r < 2; ++r) {
    ModelRunner& runner = r == 0 ? *with_graphs : *direct;
    std::vector<int32_t> tokens = {11, 22, 33};
    for (int position = 0; position < 40; ++position) {
      ForwardBatch batch;
      for (int s = 0; s < 3; ++s) {
        SequenceStep step;
        step.tokens = std::span(tokens).subspan(s, 1);
        step.start_position = position;
        step.block_tables = {tables[s][0], tables[s][1]};
        batch.sequences.push_back(step);
      }
      ForwardOutput out;
      runner.forward(batch, out);
      logits[r].insert(logits[r].end(), out.logits.begin(), out.logits.end());
      for (int s = 0; s < 3; ++s)
        tokens[s] = static_cast<int32_t>(std::max_element(out.logits.begin() + s * vocab, out.logits.begin() + (s + 1) * vocab) -
                                         (out.logits.begin() + s * vocab));
    }
  }
  EXPECT_EQ(logits[0], logits[1]);
}

TEST_P(CudaRunnerTest, TwoLayerFullWidthModelMatchesCpuRunner) {
  TinyModelOptions o;  // gpt-oss-20b's dimensions (../shared/reference/gpt-oss-architecture.md), two layers
  o.layers = 2;
  o.hidden = 2880;
  o.heads = 64;
  o.kv_heads = 8;
  o.head_dim = 64;
  o.experts = 32;
  o.top_k = 4;
  o.intermediate = 2880;
  o.window = 128;
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(o)));
  CpuRunner cpu(checkpoint, 0);
  auto gpu = cuda_runner(checkpoint);
  const int vocab = checkpoint->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {prompt(150, 4, vocab), prompt(21, 5, vocab)};
  const AllLogits expected = run_prompts(cpu, prompts, 50), got = run_prompts(*gpu, prompts, 50);
  expect_logits_close("two-layer gpt-oss-20b-width logits batched", GetParam(), got.batched, expected.batched, vocab);
  expect_logits_close("two-layer gpt-oss-20b-width logits chunked", GetParam(), got.chunked, expected.chunked, vocab);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaRunnerTest, ::testing::Values("bf16", "f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moeserve
