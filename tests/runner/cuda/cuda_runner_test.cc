// The CUDA runner against the CPU runner: logits of the tiny model (a batch of prompts longer than the sliding
// window in one step, then the same prompts in chunks over scattered blocks), greedy and sampled continuations of
// 64 tokens, CUDA-graph decode against the same steps run directly, a two-layer model of gpt-oss-20b's full
// width, and tree verification: tree steps (beside a causal chunk, through both attention kernels, with a window
// shorter than the trees' depth too), the decode step after move_kv_slots commits a path, and greedy engine output
// with tree speculation against plain decoding; graphed chain verify steps (with captured layers) against the same
// steps run directly; programmatic dependent launch against ordinary launches (bit for bit). The step metadata's
// tree layout and verify-step graph padding are checked without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include "cuda_test_util.h"
#include "engine/engine_harness.h"
#include "engine/generate.h"
#include "engine/speculative/spec_engine_harness.h"
#include "model/gpt_oss/checkpoint.h"
#include "model/gpt_oss/make_tiny.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/programmatic_launch.h"
#include "runner/sequence_step.h"
#include "runner_compare.h"
#include "test_util.h"

namespace moeserve {
namespace {

using testing::AllLogits;
using testing::expect_logits_close;
using testing::prompt;
using testing::run_prompts;

class CudaRunnerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::unique_ptr<ModelRunner> cuda_runner(std::shared_ptr<const Checkpoint> checkpoint, bool graphs = true,
                                           bool fused_small_steps = false) {
    CudaRunnerOptions options;
    options.precision = GetParam();
    options.cuda_graphs = graphs;
    options.fused_qkv_rope = options.fused_o_norm = options.fused_router = fused_small_steps;
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

// Chain verify steps (every sequence k + 1 tokens, a logits row each) are graphed per (bucket, tokens a sequence,
// captured layers) like decode steps: four sequences (bucket 4), then three (bucket 4 with one padding sequence of
// as many tokens), through steps of 4, 1, 3 and 4 tokens again, each shape replayed, with the residual stream of
// both layers captured (what EAGLE-3's verify steps ask for). Logits and captured rows must equal those of the same
// steps run directly, bit for bit, except f32 with padding: the f32 decode attention splits its keys by the step's
// token count (attention_decode_f32_splits), padding included, so there the sums run in another order (1e-5).
TEST_P(CudaRunnerTest, GraphVerifyStepsMatchDirectSteps) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  const int vocab = checkpoint->config().vocab_size, hidden = checkpoint->config().hidden_size;
  const std::vector<int> lengths = {4, 4, 1, 1, 3, 3, 4, 4, 4, 1, 3, 4};  // 36 positions: past the window of 32
  for (int S : {4, 3}) {
    auto with_graphs = cuda_runner(checkpoint, true), direct = cuda_runner(checkpoint, false);
    for (auto* runner : {with_graphs.get(), direct.get()}) runner->allocate_kv_cache({16, 64});
    std::vector<std::vector<std::vector<int32_t>>> tables(S, std::vector<std::vector<int32_t>>(2));
    for (int s = 0; s < S; ++s)
      for (int g = 0; g < 2; ++g)
        for (int b = 0; b < 4; ++b) tables[s][g].push_back(s * 8 + g * 4 + b);
    std::vector<float> logits[2], captured[2];
    for (int r = 0; r < 2; ++r) {
      ModelRunner& runner = r == 0 ? *with_graphs : *direct;
      std::vector<std::vector<int32_t>> tokens(S);
      for (int s = 0; s < S; ++s) tokens[s] = {11 + s, 5, 7, 9};
      int position = 0;
      for (int n : lengths) {
        ForwardBatch batch;
        batch.capture_layers = {0, 1};
        for (int s = 0; s < S; ++s) {
          SequenceStep step;
          step.tokens = std::span(tokens[s]).first(n);
          step.num_logits = n;
          step.start_position = position;
          step.block_tables = {tables[s][0], tables[s][1]};
          batch.sequences.push_back(step);
        }
        ForwardOutput out;
        runner.forward(batch, out);
        ASSERT_EQ(out.logits.size(), static_cast<size_t>(S * n * vocab));
        ASSERT_EQ(out.captured.size(), 2u);
        for (const auto& layer : out.captured) {
          ASSERT_EQ(layer.size(), static_cast<size_t>(S * n * hidden));
          captured[r].insert(captured[r].end(), layer.begin(), layer.end());
        }
        logits[r].insert(logits[r].end(), out.logits.begin(), out.logits.end());
        // The next step's tokens: each row's argmax (as if every draft were accepted), the same for both runners.
        for (int s = 0; s < S; ++s)
          for (int j = 0; j < 4; ++j) {
            const auto row = out.logits.begin() + (s * n + std::min(j, n - 1)) * vocab;
            tokens[s][j] = static_cast<int32_t>((std::max_element(row, row + vocab) - row + j) % vocab);
          }
        position += n;
      }
    }
    if (GetParam() == "bf16" || S == 4) {
      EXPECT_EQ(logits[0], logits[1]) << S << " sequences";
      EXPECT_EQ(captured[0], captured[1]) << S << " sequences";
    } else {
      ASSERT_EQ(logits[0].size(), logits[1].size());
      ASSERT_EQ(captured[0].size(), captured[1].size());
      for (size_t i = 0; i < logits[0].size(); ++i)
        ASSERT_NEAR(logits[0][i], logits[1][i], 1e-5f * (1.0f + std::abs(logits[1][i]))) << "logit " << i;
      for (size_t i = 0; i < captured[0].size(); ++i)
        ASSERT_NEAR(captured[0][i], captured[1][i], 1e-5f * (1.0f + std::abs(captured[1][i]))) << "captured " << i;
    }
  }
}

TEST_P(CudaRunnerTest, TwoLayerFullWidthModelMatchesCpuRunner) {
  const TinyModelOptions o = testing::full_width_two_layers();
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(o)));
  CpuRunner cpu(checkpoint, 0);
  auto gpu = cuda_runner(checkpoint);
  const int vocab = checkpoint->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {prompt(150, 4, vocab), prompt(21, 5, vocab)};
  const AllLogits expected = run_prompts(cpu, prompts, 50), got = run_prompts(*gpu, prompts, 50);
  expect_logits_close("two-layer gpt-oss-20b-width logits batched", GetParam(), got.batched, expected.batched, vocab);
  expect_logits_close("two-layer gpt-oss-20b-width logits chunked", GetParam(), got.chunked, expected.chunked, vocab);
}

// ---- programmatic dependent launch ----------------------------------------------------------------------------

// Every logits row of a prefill of three prompts, then of 24 greedy decode steps (CUDA graphs: bucket 4, one
// padding sequence), each sequence over its own blocks.
std::vector<float> prefill_and_decode_logits(ModelRunner& runner) {
  const int groups = kv_groups_of(runner.config()).num_groups(), vocab = runner.config().vocab_size;
  constexpr int kBlockSize = 8, kBlocksEach = 8, kDecodeSteps = 24;  // 33 + 24 positions fit 64
  const std::vector<std::vector<int32_t>> prompts = {prompt(33, 6, vocab), prompt(9, 7, vocab), prompt(20, 8, vocab)};
  const int n = static_cast<int>(prompts.size());
  runner.allocate_kv_cache({kBlockSize, static_cast<int64_t>(n) * groups * kBlocksEach});
  std::vector<std::vector<std::vector<int32_t>>> tables(n, std::vector<std::vector<int32_t>>(groups));
  for (int s = 0; s < n; ++s)
    for (int g = 0; g < groups; ++g)
      for (int b = 0; b < kBlocksEach; ++b) tables[s][g].push_back((s * groups + g) * kBlocksEach + b);
  auto greedy = [&](const ForwardOutput& out, int64_t row) {
    const auto begin = out.logits.begin() + row * vocab;
    return static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin);
  };
  ForwardBatch prefill;
  for (int s = 0; s < n; ++s)
    prefill.sequences.push_back(
        testing::sequence_step(prompts[s], 0, tables[s], static_cast<int32_t>(prompts[s].size())));
  ForwardOutput out;
  runner.forward(prefill, out);
  std::vector<float> logits = out.logits;
  std::vector<int32_t> tokens(n);
  for (int s = 0, last = -1; s < n; ++s) tokens[s] = greedy(out, last += static_cast<int>(prompts[s].size()));
  for (int step = 0; step < kDecodeSteps; ++step) {
    ForwardBatch batch;
    for (int s = 0; s < n; ++s)
      batch.sequences.push_back(testing::sequence_step(std::span(tokens).subspan(s, 1),
                                                       static_cast<int32_t>(prompts[s].size()) + step, tables[s], 1));
    runner.forward(batch, out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    for (int s = 0; s < n; ++s) tokens[s] = greedy(out, s);
  }
  return logits;
}

// PDL changes when a kernel's blocks start, never what they compute: the same logits, bit for bit, with the
// switch off and on, on the tiny model and on the two-layer full-width one (whose shapes take the wgmma kernels).
TEST_P(CudaRunnerTest, ProgrammaticLaunchMatchesOrdinaryLaunch) {
  struct Restore {
    bool was = cuda::programmatic_launch_enabled();
    ~Restore() { cuda::set_programmatic_launch(was); }
  } restore;
  for (const TinyModelOptions& options : {TinyModelOptions{}, testing::full_width_two_layers()}) {
    SCOPED_TRACE("hidden " + std::to_string(options.hidden));
    auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(options)));
    std::vector<float> logits[2];
    for (int on = 0; on < 2; ++on) {
      cuda::set_programmatic_launch(on == 1);
      logits[on] = prefill_and_decode_logits(*cuda_runner(checkpoint));
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    ASSERT_FALSE(logits[0].empty());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
  }
}

// The fused kernels of steps of 1-4 tokens (QKV + RoPE + KV write, output projection + add + RMSNorm, router +
// top-k + grouping) compute what the launches they replace compute: the same logits, bit for bit, over a prefill and
// 24 graphed decode steps of 3 sequences, on the tiny model and on the two-layer full-width one. (f32 runs the
// separate launches either way: the fused kernels are bf16 only.)
TEST_P(CudaRunnerTest, FusedSmallStepKernelsMatchSeparateLaunches) {
  for (const TinyModelOptions& options : {TinyModelOptions{}, testing::full_width_two_layers()}) {
    SCOPED_TRACE("hidden " + std::to_string(options.hidden));
    auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(options)));
    std::vector<float> logits[2];
    for (int fused = 0; fused < 2; ++fused)
      logits[fused] = prefill_and_decode_logits(*cuda_runner(checkpoint, true, fused == 1));
    ASSERT_EQ(logits[0].size(), logits[1].size());
    ASSERT_FALSE(logits[0].empty());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
  }
}

// programmatic_launch.h's default-stream handles are the runtime's.
TEST(CudaProgrammaticLaunch, DefaultStreamHandlesAreTheRuntimes) {
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(cudaStreamLegacy), cuda::kLegacyStream);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(cudaStreamPerThread), cuda::kPerThreadStream);
}

// ---- tree verification ------------------------------------------------------------------------------------------

constexpr int kTreeBlockSize = 8;

// Parents of a random tree of n tokens under a root (token 0), no token deeper than max_depth.
std::vector<int32_t> random_tree(std::mt19937& rng, int n, int max_depth) {
  std::vector<int32_t> parent{-1}, depth{0};
  for (int i = 1; i < n; ++i) {
    std::vector<int32_t> open;
    for (int j = 0; j < i; ++j)
      if (depth[j] < max_depth) open.push_back(j);
    const int32_t up = open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(rng)];
    parent.push_back(up);
    depth.push_back(depth[up] + 1);
  }
  return parent;
}

// A sequence of a tree comparison: its prompt (cached by a first step), then a step of `tokens`, a tree when
// `parent` is set (else a causal chunk), then one token after the committed path: the tree's deepest branch,
// moved to contiguous slots with move_kv_slots.
struct TreeSequence {
  std::vector<int32_t> prompt, tokens, parent, next;
  std::vector<std::vector<int32_t>> tables;

  std::vector<int32_t> committed_path() const {
    if (parent.empty()) {
      std::vector<int32_t> all(tokens.size());
      std::iota(all.begin(), all.end(), 0);
      return all;
    }
    std::vector<int32_t> depth(parent.size());
    for (size_t i = 1; i < parent.size(); ++i) depth[i] = depth[parent[i]] + 1;
    std::vector<int32_t> path;
    for (int32_t i = static_cast<int32_t>(std::max_element(depth.begin(), depth.end()) - depth.begin()); i >= 0;
         i = parent[i])
      path.insert(path.begin(), i);
    return path;
  }
  SequenceStep step(std::span<const int32_t> step_tokens, int32_t start, int32_t num_logits) const {
    return testing::sequence_step(step_tokens, start, tables, num_logits);
  }
};

// Sequences with the given prompt lengths and step sizes (a tree of at most max_depth levels, or a causal chunk
// where tree_size is negative: its length), each over its own shuffled blocks. *num_blocks: the pool they need.
std::vector<TreeSequence> tree_sequences(const ModelConfig& config, const std::vector<std::pair<int, int>>& shapes,
                                         int max_depth, uint32_t seed, int64_t* num_blocks) {
  std::mt19937 rng(seed);
  const int groups = kv_groups_of(config).num_groups();
  std::vector<TreeSequence> seqs;
  std::vector<int> blocks_each;
  for (const auto& [prompt_length, tree_size] : shapes) {
    TreeSequence seq;
    seq.prompt = prompt(prompt_length, static_cast<int>(seqs.size()) + 11, config.vocab_size);
    const int n = std::abs(tree_size);
    seq.tokens = prompt(n, static_cast<int>(seqs.size()) + 31, config.vocab_size);
    seq.tokens[0] = seq.prompt.back();  // a verify step's root is the last committed token
    seq.prompt.pop_back();
    if (tree_size > 0) seq.parent = random_tree(rng, n, max_depth);
    seq.next = {static_cast<int32_t>((seqs.size() * 7919 + 5) % config.vocab_size)};
    blocks_each.push_back((prompt_length + n + kTreeBlockSize) / kTreeBlockSize);
    seqs.push_back(std::move(seq));
  }
  *num_blocks = 0;
  for (int b : blocks_each) *num_blocks += static_cast<int64_t>(groups) * b;
  std::vector<int32_t> pool(*num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int g = 0; g < groups; ++g) {
      seqs[s].tables.emplace_back(pool.begin() + next, pool.begin() + next + blocks_each[s]);
      next += blocks_each[s];
    }
  return seqs;
}

struct TreeLogits {
  std::vector<float> tree, next;  // every row of the tree step; the step after the committed paths
};

TreeLogits run_tree_steps(ModelRunner& runner, const std::vector<TreeSequence>& seqs, int64_t num_blocks) {
  runner.allocate_kv_cache({kTreeBlockSize, num_blocks});
  ForwardOutput out;
  ForwardBatch prefill, tree, next;
  for (const TreeSequence& seq : seqs) prefill.sequences.push_back(seq.step(seq.prompt, 0, 1));
  runner.forward(prefill, out);
  for (const TreeSequence& seq : seqs) {
    SequenceStep step = seq.step(seq.tokens, static_cast<int32_t>(seq.prompt.size()),
                                 static_cast<int32_t>(seq.tokens.size()));
    step.tree_parent = seq.parent;
    tree.sequences.push_back(step);
  }
  TreeLogits result;
  runner.forward(tree, out);
  result.tree = out.logits;
  for (const TreeSequence& seq : seqs) {
    const int32_t start = static_cast<int32_t>(seq.prompt.size());
    const std::vector<int32_t> path = seq.committed_path();
    std::vector<KvSlotMove> moves;
    for (size_t j = 0; j < path.size(); ++j)
      if (path[j] != static_cast<int32_t>(j)) moves.push_back({start + path[j], start + static_cast<int32_t>(j)});
    std::vector<std::span<const int32_t>> tables(seq.tables.begin(), seq.tables.end());
    runner.move_kv_slots(tables, moves);
    next.sequences.push_back(seq.step(seq.next, start + static_cast<int32_t>(path.size()), 1));
  }
  runner.forward(next, out);
  result.next = out.logits;
  return result;
}

// Tree steps on the tiny model (window 32, prompts past it) and on one with a window of 3 (shorter than the trees'
// depth, so sliding layers drop ancestors), CUDA against CPU; then a step after each tree's deepest path is moved
// into place.
void expect_tree_steps_match(const std::string& what, const std::string& precision,
                             const std::vector<std::pair<int, int>>& shapes,
                             const std::function<std::unique_ptr<ModelRunner>(std::shared_ptr<const Checkpoint>)>& gpu_of) {
  for (int window : {32, 3}) {
    TinyModelOptions o;
    o.window = window;
    auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model(o)));
    CpuRunner cpu(checkpoint, 0);
    auto gpu = gpu_of(checkpoint);
    const int vocab = checkpoint->config().vocab_size;
    int64_t num_blocks = 0;
    const auto seqs = tree_sequences(checkpoint->config(), shapes, window == 3 ? 6 : 4, 17 + window, &num_blocks);
    const TreeLogits expected = run_tree_steps(cpu, seqs, num_blocks), got = run_tree_steps(*gpu, seqs, num_blocks);
    const std::string label = what + " window " + std::to_string(window);
    expect_logits_close(label + " tree step", precision, got.tree, expected.tree, vocab);
    expect_logits_close(label + " step after move_kv_slots", precision, got.next, expected.next, vocab);
  }
}

// Fewer than 16 rows per sequence: split-key decode attention.
TEST_P(CudaRunnerTest, TreeStepsWithFewRowsMatchCpuRunner) {
  expect_tree_steps_match("trees of 11, 6 and 9 tokens", GetParam(), {{45, 11}, {12, 6}, {70, 9}},
                          [&](auto checkpoint) { return cuda_runner(std::move(checkpoint)); });
}

// 16 rows or more in a sequence: prefill attention (in bf16; f32 always decodes), with a causal chunk in the step.
TEST_P(CudaRunnerTest, TreeStepsWithManyRowsMatchCpuRunner) {
  expect_tree_steps_match("trees of 20, 64 and 5 tokens, a causal chunk of 30", GetParam(),
                          {{40, 20}, {9, -30}, {70, 64}, {33, 5}},
                          [&](auto checkpoint) { return cuda_runner(std::move(checkpoint)); });
}

// The engine speculating with trees (and a chain, and a request that does not speculate) on the CUDA runner: greedy
// output equals the same runner's plain decoding. The draft comes from a CPU copy of the target whose greedy token
// sits at a random sibling, so accepted paths are moved into place.
TEST_P(CudaRunnerTest, GreedyTreeSpeculationMatchesPlainDecoding) {
  namespace spec = speculative::testing;
  auto checkpoint = spec::small_vocab_target();
  auto gpu = cuda_runner(checkpoint), reference = cuda_runner(checkpoint);
  const std::vector<std::optional<speculative::DraftShape>> shapes = {
      spec::tree(4, 3, 10), spec::tree(3, 2, 6), spec::chain(3), std::nullopt, spec::tree(4, 4, 20)};
  std::vector<testing::Arrival> arrivals;
  for (int i = 0; i < 10; ++i) {
    testing::Arrival a;
    a.step = i % 4;
    a.spec.prompt = prompt(5 + 9 * i, i + 1, checkpoint->config().vocab_size);  // up to 86: past the window
    a.spec.max_tokens = 24 + 3 * i;
    a.spec.sampling.temperature = 0;
    a.spec.speculation = shapes[i % shapes.size()].value_or(speculative::DraftShape{});
    arrivals.push_back(std::move(a));
  }
  EngineCore core(*gpu, spec::spec_engine_config(spec::oracle_drafter(0.7)));
  const auto got = testing::run_requests(core, arrivals);
  ASSERT_EQ(got.size(), arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const auto expected = spec::alone(*reference, arrivals[i].spec);
    size_t same = 0;
    while (same < std::min(got.at(i).tokens.size(), expected.size()) && got.at(i).tokens[same] == expected[same]) ++same;
    std::printf("tree speculation %s request %zu: %zu of %zu tokens equal\n", GetParam().c_str(), i, same,
                expected.size());
    // As for the continuations above: fp32 must agree token for token, bf16 verify steps run other kernels and
    // batch sizes than plain decode, so a near tie may break the other way and is only reported.
    if (GetParam() == "f32") {
      EXPECT_EQ(got.at(i).tokens, expected) << "request " << i;
    }
  }
  const EngineMetrics m = core.metrics();
  EXPECT_EQ(m.kv_blocks_in_use, 0);
  EXPECT_GT(m.spec_accepted_tokens, 0u);
  EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);  // rejections: paths off the first child were moved
}

// A tree step's metadata on the host (no device needed): positions start + depth; per token the full-layer mask
// of itself and its ancestors and the sliding-layer mask of those within the window; all ones for a causal
// sequence beside the tree; no masks in a step without a tree; trees over 64 tokens refused.
TEST(CudaStepMetadata, TreePositionsAndMasks) {
  TinyModelOptions o;
  o.window = 2;
  const ModelConfig config = tiny_model_config(o);
  const KvGroups groups = kv_groups_of(config);
  const KvCacheLayout kv{8, 64};
  const std::vector<int32_t> table{3, 1, 2, 0};
  const std::vector<int32_t> tree_tokens{5, 6, 7, 8, 9}, parent{-1, 0, 0, 1, 3}, chunk{1, 2, 3};
  auto step_of = [&](std::span<const int32_t> tokens, int32_t start) {
    SequenceStep step;
    step.tokens = tokens;
    step.start_position = start;
    step.block_tables.assign(groups.num_groups(), table);
    return step;
  };
  ForwardBatch batch;
  batch.sequences = {step_of(tree_tokens, 10), step_of(chunk, 4)};
  batch.sequences[0].tree_parent = parent;
  cuda::StepMetadata meta;
  meta.build(batch, config, groups, kv, 0, 0, 0, cuda::kNoPrefillTiles);
  const cuda::StepView view = meta.view(meta.host().data());  // host pointers: the layout is the same
  ASSERT_TRUE(meta.has_tree());
  ASSERT_NE(view.tree_masks, nullptr);
  const std::vector<int32_t> positions(view.positions, view.positions + 8);
  EXPECT_EQ(positions, (std::vector<int32_t>{10, 11, 11, 12, 13, 4, 5, 6}));
  // [token][full, sliding] low words; depths 0, 1, 1, 2, 3.
  const std::vector<int32_t> full{0b1, 0b11, 0b101, 0b1011, 0b11011}, sliding{0b1, 0b11, 0b101, 0b1010, 0b11000};
  for (int t = 0; t < 5; ++t) {
    EXPECT_EQ(view.tree_masks[t * 4], full[t]) << "token " << t;
    EXPECT_EQ(view.tree_masks[t * 4 + 1], 0) << "token " << t;
    EXPECT_EQ(view.tree_masks[t * 4 + 2], sliding[t]) << "token " << t;
    EXPECT_EQ(view.tree_masks[t * 4 + 3], 0) << "token " << t;
  }
  for (int t = 5; t < 8; ++t)
    for (int w = 0; w < 4; ++w) EXPECT_EQ(view.tree_masks[t * 4 + w], -1) << "causal token " << t;

  batch.sequences[0].tree_parent = {};
  meta.build(batch, config, groups, kv, 0, 0, 0, cuda::kNoPrefillTiles);
  EXPECT_EQ(meta.view(meta.host().data()).tree_masks, nullptr);

  std::vector<int32_t> big(65, 1), big_parent(65);
  std::iota(big_parent.begin(), big_parent.end(), -1);
  ForwardBatch too_big;
  too_big.sequences = {step_of(big, 0)};
  too_big.sequences[0].tree_parent = big_parent;
  EXPECT_THROW(meta.build(too_big, config, groups, kv, 0, 0, 0, cuda::kNoPrefillTiles), std::exception);
}

// Graph padding of a verify-shaped step on the host: padding sequences of the real ones' length at positions 0 ..
// n - 1 over the padding block, with a (null) logits row per token after the real rows; a step whose sequences differ
// in length, or have fewer logits rows than tokens, is refused.
TEST(CudaStepMetadata, VerifyStepGraphPadding) {
  const ModelConfig config = tiny_model_config({});
  const KvGroups groups = kv_groups_of(config);
  const KvCacheLayout kv{8, 64};
  const std::vector<int32_t> table{3, 1, 2, 0}, a{5, 6, 7}, b{8, 9, 10}, short_one{1, 2};
  auto step_of = [&](std::span<const int32_t> tokens, int32_t start) {
    SequenceStep step;
    step.tokens = tokens;
    step.num_logits = static_cast<int>(tokens.size());
    step.start_position = start;
    step.block_tables.assign(groups.num_groups(), table);
    return step;
  };
  ForwardBatch batch;
  batch.sequences = {step_of(a, 10), step_of(b, 4), step_of(a, 20)};
  cuda::StepMetadata meta;
  const int32_t padding_block = 7;
  meta.build(batch, config, groups, kv, 4, 3, padding_block, cuda::kNoPrefillTiles);
  const cuda::StepView view = meta.view(meta.host().data());
  EXPECT_EQ(meta.num_tokens(), 12);
  EXPECT_EQ(meta.num_seqs(), 4);
  ASSERT_EQ(meta.rows().size(), 12u);
  for (int r = 0; r < 12; ++r) {
    EXPECT_EQ(meta.rows()[r].token, r);
    EXPECT_EQ(meta.rows()[r].step == nullptr, r >= 9) << "row " << r;
  }
  const std::vector<int32_t> positions(view.positions, view.positions + 12);
  EXPECT_EQ(positions, (std::vector<int32_t>{10, 11, 12, 4, 5, 6, 20, 21, 22, 0, 1, 2}));
  EXPECT_EQ(view.seq_q_len[3], 3);
  EXPECT_EQ(view.seq_context[3], 3);
  EXPECT_EQ(view.token_seq[11], 3);
  const int stride = view.table_stride[0];
  for (int g = 0; g < groups.num_groups(); ++g)
    for (int i = 0; i < stride; ++i) EXPECT_EQ(view.block_tables[(3 * groups.num_groups() + g) * stride + i], padding_block);

  batch.sequences[1] = step_of(short_one, 4);
  EXPECT_THROW(meta.build(batch, config, groups, kv, 4, 3, padding_block, cuda::kNoPrefillTiles), std::exception);
  batch.sequences[1] = step_of(b, 4);
  batch.sequences[1].num_logits = 1;
  EXPECT_THROW(meta.build(batch, config, groups, kv, 4, 3, padding_block, cuda::kNoPrefillTiles), std::exception);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaRunnerTest, ::testing::Values("bf16", "f32"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moeserve
