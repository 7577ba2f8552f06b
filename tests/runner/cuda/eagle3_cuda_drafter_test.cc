// The EAGLE-3 draft head on the GPU against the CPU drafter (its reference): the same calls (several sequences of
// different lengths, extensions, a rollback) give the same chains and trees, token for token where the CPU's
// choice is not a near tie, with cumulative scores within bf16's error; chains drafted through CUDA graphs equal
// the same kernels run directly; and in the engine on the CUDA runner, greedy output with the GPU head
// speculating equals plain decoding. Its attention kernel alone matches cpu::attend_one_head. Every test skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "cuda_test_util.h"
#include "engine/engine_harness.h"
#include "engine/speculative/spec_engine_harness.h"
#include "model/eagle3_fixture.h"
#include "runner/cpu/eagle3_drafter.h"
#include "runner/cpu/ops.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/eagle3_cuda_drafter.h"
#include "runner/cuda/eagle3_kernels.h"

namespace moeserve::speculative {
namespace {

// bf16 activations and KV against fp32: a draft log-probability moves by up to this much per depth (cumulative
// scores add one per depth). Where the CPU's two best tokens are closer than that, the GPU may pick the other.
constexpr double kScoreToleranceAtDepth = 0.03;

std::shared_ptr<const Eagle3Checkpoint> head(const std::string& dir) {
  return Eagle3Checkpoint::open(dir, testing::tiny_target()->config());
}
std::string tiny_head(const std::string& names = "midlayer", bool input_norm = false) {
  return testing::tiny_draft_dir(testing::draft_options(names, input_norm));
}

std::unique_ptr<Eagle3Drafter> cpu_drafter(const std::string& dir) {
  return std::make_unique<Eagle3Drafter>(head(dir), Eagle3Target::of(testing::tiny_target()),
                                         Eagle3DrafterOptions{8, 512, 2});
}

std::unique_ptr<cuda::CudaEagle3Drafter> gpu_drafter(const std::string& dir, bool graphs) {
  auto checkpoint = head(dir);
  CudaDrafterOptions o;
  o.block_size = 8;
  o.num_blocks = 512;
  o.cuda_graphs = graphs;
  return std::make_unique<cuda::CudaEagle3Drafter>(
      checkpoint->config(), cuda::Eagle3DeviceWeights::upload(*checkpoint, Eagle3Target::of(testing::tiny_target())),
      o);
}

// One drafter call with the storage its DraftInputs point into.
struct Call {
  std::vector<std::vector<float>> features;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<DraftInput> inputs;
};

// Three sequences: first calls of 5, 17 and 30 positions (over block boundaries of 8), then extensions of 1, 2
// and 3, then a rollback of each to 4 positions before its end with new features, then one more step.
std::vector<Call> script(const DraftShape& shape, int feature_width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> feature(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> token(0, 511);
  const std::vector<int> first = {5, 17, 30};
  std::vector<int> length(first.size(), 0);
  std::vector<Call> calls;
  auto add_call = [&](const std::vector<int>& starts, const std::vector<int>& counts) {
    Call call;
    for (size_t s = 0; s < starts.size(); ++s) {
      call.features.emplace_back(static_cast<size_t>(counts[s]) * feature_width);
      for (float& f : call.features.back()) f = feature(rng);
      call.tokens.emplace_back(counts[s]);
      for (int32_t& t : call.tokens.back()) t = token(rng);
    }
    for (size_t s = 0; s < starts.size(); ++s) {
      DraftInput in;
      in.sequence_id = 100 + s;
      in.start_position = starts[s];
      in.features = call.features[s];
      in.next_tokens = call.tokens[s];
      in.shape = shape;
      call.inputs.push_back(in);
      length[s] = starts[s] + counts[s];
    }
    calls.push_back(std::move(call));
  };
  add_call({0, 0, 0}, first);
  add_call(length, {1, 2, 3});
  add_call({length[0] - 4, length[1] - 4, length[2] - 4}, {2, 1, 3});
  add_call(length, {1, 1, 1});
  return calls;
}

struct Agreement {
  int nodes = 0, matched = 0;
  double max_score_error = 0;
};

// Walks both drafts in output order while they agree, comparing scores. The first difference is a near tie that
// broke the other way (a sibling order, or which node a frontier or the final cut kept): it is reported and the
// rest of the tree is not compared; a wrong computation shows as few agreeing nodes (expect_gpu_matches_cpu).
void compare(const DraftTree& cpu, const std::vector<float>& cpu_scores, const DraftTree& gpu,
             const std::vector<float>& gpu_scores, const std::string& where, Agreement& agreement) {
  ASSERT_EQ(cpu.size(), cpu_scores.size());
  ASSERT_EQ(gpu.size(), gpu_scores.size());
  EXPECT_EQ(cpu.size(), gpu.size()) << where;
  agreement.nodes += static_cast<int>(cpu.size());
  for (size_t i = 0; i < std::min(cpu.size(), gpu.size()); ++i) {
    int depth = 1;
    for (int p = cpu.parent[i]; p >= 0; p = cpu.parent[p]) ++depth;
    const double error = std::abs(static_cast<double>(cpu_scores[i]) - gpu_scores[i]);
    if (cpu.tokens[i] != gpu.tokens[i] || cpu.parent[i] != gpu.parent[i]) {
      std::printf("%s: near tie at node %zu (depth %d): score error %.4f\n", where.c_str(), i, depth, error);
      return;
    }
    EXPECT_LE(error, kScoreToleranceAtDepth * depth) << where << " node " << i;
    agreement.max_score_error = std::max(agreement.max_score_error, error);
    ++agreement.matched;
  }
}

void expect_gpu_matches_cpu(const DraftShape& shape, const std::string& dir) {
  auto cpu = cpu_drafter(dir);
  auto gpu = gpu_drafter(dir, true);
  Agreement agreement;
  const std::vector<Call> calls = script(shape, static_cast<int>(cpu->config().feature_width()), 5);
  for (size_t c = 0; c < calls.size(); ++c) {
    std::vector<DraftTree> cpu_out, gpu_out;
    std::vector<std::vector<float>> cpu_scores, gpu_scores;
    cpu->propose_scored(calls[c].inputs, cpu_out, &cpu_scores);
    gpu->propose_scored(calls[c].inputs, gpu_out, &gpu_scores);
    ASSERT_EQ(gpu_out.size(), cpu_out.size());
    for (size_t s = 0; s < cpu_out.size(); ++s) {
      const uint64_t id = calls[c].inputs[s].sequence_id;
      EXPECT_EQ(gpu->cached_positions(id), cpu->cached_positions(id));
      compare(cpu_out[s], cpu_scores[s], gpu_out[s], gpu_scores[s],
              "call " + std::to_string(c) + " sequence " + std::to_string(s), agreement);
    }
  }
  std::printf("shape (%d, top_k %d, total %d): %d of %d nodes equal, max score error %.4f\n", shape.num_draft_tokens,
              shape.top_k, shape.total_tokens, agreement.matched, agreement.nodes, agreement.max_score_error);
  // A near tie drops the rest of its draft from the comparison, so this is loose; a wrong computation agrees on
  // about one node in the draft vocabulary.
  EXPECT_GE(agreement.matched * 2, agreement.nodes);
}

TEST(Eagle3CudaDrafter, ChainsMatchTheCpuDrafter) {
  MOESERVE_REQUIRE_CUDA();
  for (int k : {1, 3, 7}) expect_gpu_matches_cpu(testing::chain(k), tiny_head());
  // The other format branches: norm_before_fc; a full-vocabulary f32 head with its own embedding and
  // norm_before_residual.
  expect_gpu_matches_cpu(testing::chain(3), tiny_head("layers", true));
  expect_gpu_matches_cpu(testing::chain(3), testing::full_vocab_head_dir());
}

TEST(Eagle3CudaDrafter, TreesMatchTheCpuDrafter) {
  MOESERVE_REQUIRE_CUDA();
  expect_gpu_matches_cpu(testing::tree(4, 3, 10), tiny_head());
  expect_gpu_matches_cpu(testing::tree(3, 2, 0), tiny_head("layers", true));
}

// The graphed chain (argmax on the device, one copy back) against the same kernels run directly, and against the
// scored path (host search over device top-k): the same tokens.
TEST(Eagle3CudaDrafter, GraphedChainsEqualDirectRuns) {
  MOESERVE_REQUIRE_CUDA();
  for (int k : {3, 7}) {
    auto graphed = gpu_drafter(tiny_head(), true);
    auto direct = gpu_drafter(tiny_head(), false);
    auto scored = gpu_drafter(tiny_head(), true);
    const std::vector<Call> calls = script(testing::chain(k), static_cast<int>(graphed->config().feature_width()), 9);
    for (size_t c = 0; c < calls.size(); ++c) {
      std::vector<DraftTree> a, b, d;
      std::vector<std::vector<float>> scores;
      graphed->propose(calls[c].inputs, a);
      direct->propose(calls[c].inputs, b);
      scored->propose_scored(calls[c].inputs, d, &scores);
      for (size_t s = 0; s < a.size(); ++s) {
        EXPECT_EQ(a[s].tokens, b[s].tokens) << "k " << k << " call " << c << " sequence " << s;
        EXPECT_EQ(a[s].tokens, d[s].tokens) << "k " << k << " call " << c << " sequence " << s;
        EXPECT_EQ(a[s].parent, d[s].parent);
      }
    }
  }
}

// The head's own prefix cache on the GPU: a sequence started from cached blocks of an earlier one (released) and
// fed only the positions after them drafts exactly what a sequence fed everything drafts.
TEST(Eagle3CudaDrafter, APrefixFromTheCacheDraftsAsIfFed) {
  MOESERVE_REQUIRE_CUDA();
  auto drafter = gpu_drafter(tiny_head(), true);
  const int width = static_cast<int>(drafter->config().feature_width());
  std::mt19937 rng(17);
  std::normal_distribution<float> feature(0.0f, 1.0f);
  std::vector<float> features(30 * width);
  for (float& f : features) f = feature(rng);
  std::vector<int32_t> tokens(31);  // positions 0..30: a feature for each of 0..29, and the newest token
  for (int32_t& t : tokens) t = std::uniform_int_distribution<int32_t>(0, 511)(rng);
  auto input = [&](uint64_t id, int32_t start) {
    DraftInput in;
    in.sequence_id = id;
    in.start_position = start;
    in.start_token = tokens[start];
    in.features = std::span<const float>(features).subspan(static_cast<size_t>(start) * width);
    in.next_tokens = std::span<const int32_t>(tokens).subspan(start + 1);
    in.shape = testing::chain(5);
    return in;
  };
  std::vector<DraftTree> fed, restored;
  drafter->propose(std::vector<DraftInput>{input(1, 0)}, fed);
  drafter->release(1);
  // Blocks of 8: positions [0, 24) are cached with the token after them.
  EXPECT_EQ(drafter->match_prefix(2, tokens), 24);
  drafter->propose(std::vector<DraftInput>{input(2, 24)}, restored);
  EXPECT_EQ(restored[0].tokens, fed[0].tokens);
  EXPECT_EQ(drafter->cached_positions(2), 30);
}

cuda::DeviceBuffer upload_ints(const std::vector<int32_t>& values) {
  cuda::DeviceBuffer buffer(std::max<size_t>(1, values.size()) * 4);
  MOESERVE_CUDA_CHECK(cudaMemcpy(buffer.get(), values.data(), values.size() * 4, cudaMemcpyHostToDevice));
  return buffer;
}

// launch_draft_attention on random q, K and V in a scattered paged pool against cpu::attend_one_head (no sink), for
// rows of different prefix lengths, some with extra slots beyond the prefix (tree ancestors), at step 1. Shapes:
// the gpt-oss head's (64 heads over 8 KV heads, head_dim 64), head_dim 128, the tiny head's, and a GQA group of 3
// (the any-shape kernel). Inputs are bf16; the outputs are bf16 too, so 1% relative error.
TEST(Eagle3CudaKernels, DraftAttentionMatchesTheCpuReference) {
  MOESERVE_REQUIRE_CUDA();
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  const int block_size = 16, step = 1;
  const std::vector<int> prefixes = {0, 1, 37, 300, 1299, 5};
  const std::vector<int> extra_counts = {1, 0, 3, 0, 5, 2};
  std::mt19937 rng(11);
  for (const Shape& shape : {Shape{64, 8, 64}, Shape{16, 2, 128}, Shape{4, 2, 64}, Shape{6, 2, 32}}) {
    const int R = static_cast<int>(prefixes.size()), D = shape.head_dim, per_kv = shape.heads / shape.kv_heads;
    const int64_t kv_dim = static_cast<int64_t>(shape.kv_heads) * D;
    // Each row's logical slots: [0, prefix + step), then its extras at distinct slots after them.
    std::vector<std::vector<int32_t>> extras(R);
    int table_stride = 0;
    for (int r = 0; r < R; ++r) {
      std::vector<int32_t> later(3 * extra_counts[r]);
      for (size_t i = 0; i < later.size(); ++i) later[i] = prefixes[r] + step + static_cast<int32_t>(i);
      std::shuffle(later.begin(), later.end(), rng);
      extras[r].assign(later.begin(), later.begin() + extra_counts[r]);
      table_stride = std::max(table_stride, (prefixes[r] + step + 3 * extra_counts[r]) / block_size + 1);
    }
    const int num_blocks = R * table_stride;
    std::vector<int32_t> blocks(num_blocks), row_table(R), prefix(R), extra_begin(R), extra_count(R), extra_slots;
    for (int b = 0; b < num_blocks; ++b) blocks[b] = b;
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (int r = 0; r < R; ++r) {
      row_table[r] = r;
      prefix[r] = prefixes[r];
      extra_begin[r] = static_cast<int32_t>(extra_slots.size());
      extra_count[r] = extra_counts[r];
      extra_slots.insert(extra_slots.end(), extras[r].begin(), extras[r].end());
    }
    const std::vector<float> kv = moeserve::testing::round_to(
        cuda::Precision::bf16, moeserve::testing::random_floats(rng, num_blocks * block_size * 2 * kv_dim));
    const std::vector<float> q = moeserve::testing::round_to(
        cuda::Precision::bf16, moeserve::testing::random_floats(rng, R * shape.heads * D, 0.0f, 2.0f));
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));

    std::vector<float> expected(q.size());
    for (int r = 0; r < R; ++r) {
      std::vector<int32_t> slots;
      for (int t = 0; t < prefix[r] + step; ++t) slots.push_back(t);
      slots.insert(slots.end(), extras[r].begin(), extras[r].end());
      auto row_of = [&](int32_t logical, int which, int kv_head) {
        const int64_t physical = static_cast<int64_t>(blocks[r * table_stride + logical / block_size]) * block_size +
                                 logical % block_size;
        return kv.data() + (physical * 2 + which) * kv_dim + kv_head * D;
      };
      std::vector<float> scores(slots.size());
      for (int h = 0; h < shape.heads; ++h) {
        const int kv_head = h / per_kv;
        cpu::attend_one_head(
            q.data() + (static_cast<int64_t>(r) * shape.heads + h) * D, D, static_cast<int64_t>(slots.size()),
            [&](int64_t j) { return row_of(slots[j], 0, kv_head); },
            [&](int64_t j) { return row_of(slots[j], 1, kv_head); }, -INFINITY, scale, scores.data(),
            expected.data() + (static_cast<int64_t>(r) * shape.heads + h) * D);
      }
    }

    const cuda::DeviceBuffer kv_d = moeserve::testing::upload_as(cuda::Precision::bf16, kv);
    const cuda::DeviceBuffer q_d = moeserve::testing::upload_as(cuda::Precision::bf16, q);
    const cuda::DeviceBuffer stride_d = upload_ints({table_stride}), blocks_d = upload_ints(blocks),
                             row_table_d = upload_ints(row_table), prefix_d = upload_ints(prefix),
                             begin_d = upload_ints(extra_begin), count_d = upload_ints(extra_count),
                             slots_d = upload_ints(extra_slots);
    cuda::DeviceBuffer out_d(q.size() * 2);
    const cuda::DraftKvView view{kv_d.get(), block_size, shape.kv_heads, D};
    cuda::DraftRows rows;
    rows.rows = R;
    rows.table_stride = stride_d.as<int32_t>();
    rows.block_tables = blocks_d.as<int32_t>();
    rows.row_table = row_table_d.as<int32_t>();
    rows.prefix = prefix_d.as<int32_t>();
    rows.extra_begin = begin_d.as<int32_t>();
    rows.extra_count = count_d.as<int32_t>();
    rows.extra_slots = slots_d.as<int32_t>();
    rows.step = step;
    cuda::launch_draft_attention(nullptr, q_d.get(), shape.heads, scale, view, rows, out_d.get());
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = moeserve::testing::download_as(cuda::Precision::bf16, out_d.get(), q.size());
    const std::string what = "draft attention heads " + std::to_string(shape.heads) + "/" +
                             std::to_string(shape.kv_heads) + " head_dim " + std::to_string(D);
    moeserve::testing::expect_error_within(what, moeserve::testing::relative_error(got, expected), 1e-2);
    for (int r = 0; r < R; ++r) {
      std::vector<float> row(got.begin() + r * shape.heads * D, got.begin() + (r + 1) * shape.heads * D);
      std::vector<float> ref(expected.begin() + r * shape.heads * D, expected.begin() + (r + 1) * shape.heads * D);
      EXPECT_LE(moeserve::testing::relative_error(row, ref), 2e-2) << what << " row " << r;
    }
  }
}

// Greedy output with the GPU head speculating (chains) on the f32 CUDA runner equals the runner's plain decoding.
TEST(Eagle3CudaDrafter, GreedySpeculationEqualsPlainDecodingOnTheCudaRunner) {
  MOESERVE_REQUIRE_CUDA();
  auto checkpoint = testing::small_vocab_target();
  CudaRunnerOptions runner_options;
  runner_options.precision = "f32";
  auto gpu = make_cuda_runner(checkpoint, runner_options), reference = make_cuda_runner(checkpoint, runner_options);
  auto draft = head(tiny_head());
  CudaDrafterOptions drafter_options;
  drafter_options.block_size = 8;
  drafter_options.num_blocks = 1024;
  std::shared_ptr<Drafter> drafter = make_cuda_eagle3_drafter(draft, Eagle3Target::of(checkpoint), drafter_options);

  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> id(0, 511);
  const std::vector<std::optional<DraftShape>> shapes = {testing::chain(3), testing::chain(1), std::nullopt,
                                                         testing::chain(5)};
  std::vector<moeserve::testing::Arrival> arrivals;
  for (int i = 0; i < 8; ++i) {
    moeserve::testing::Arrival a;
    a.step = i % 3;
    a.spec.prompt.resize(5 + 9 * i);
    for (auto& t : a.spec.prompt) t = id(rng);
    a.spec.sampling.temperature = 0.0f;
    a.spec.max_tokens = 24 + 2 * i;
    a.spec.speculation = shapes[i % shapes.size()].value_or(DraftShape{});
    arrivals.push_back(std::move(a));
  }
  EngineCore core(*gpu, testing::spec_engine_config(drafter));
  const auto got = moeserve::testing::run_requests(core, arrivals);
  ASSERT_EQ(got.size(), arrivals.size());
  for (size_t i = 0; i < arrivals.size(); ++i)
    EXPECT_EQ(got.at(i).tokens, testing::alone(*reference, arrivals[i].spec)) << "request " << i;
  const EngineMetrics m = core.metrics();
  std::printf("GPU EAGLE-3 head in the engine: %llu of %llu draft tokens accepted, acceptance length %.3f\n",
              static_cast<unsigned long long>(m.spec_accepted_tokens),
              static_cast<unsigned long long>(m.spec_draft_tokens), m.spec_acceptance_length());
  // The tiny head's weights are random, so drafts are rarely right (acceptance can be exactly 1); what must hold is
  // that the engine drafted on the GPU and verified, and the outputs above are the target's.
  EXPECT_GT(m.spec_drafts, 0u);
  EXPECT_GT(m.spec_draft_tokens, m.spec_drafts);
  EXPECT_EQ(m.kv_blocks_in_use, 0);
}

}  // namespace
}  // namespace moeserve::speculative
