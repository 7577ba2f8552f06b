// CUDA graphs of the DeepSeek CUDA runner (deepseek_cuda_runner.h) on the tiny DeepSeek model: the logits and
// captured rows of graph-shaped steps (decode steps, and chain verify steps of 4 tokens a sequence with the last
// layer captured, as MTP's verify steps) replayed from graphs equal those of the same steps launched directly, on
// each path (f32; bf16 with a bf16 or an fp8 latent cache). The schedule crosses batch-size buckets (4 with a
// padding sequence, 2, 1, 4 again), the bf16 path's context buckets (64 -> 128 -> 256), and grows the block tables
// (a block every 16 positions), so graphs are captured, replayed, dropped when a buffer grows and captured again.
// The MTP head's chains with graphs, and greedy speculation through the engine with graphs, are in
// deepseek_mtp_test.cc.
//
// Bound: bit for bit, the GPT-OSS runner's graph tests' (cuda_runner_test.cc). Graph-shaped steps are padded to
// their bucket and planned for their context bucket with graphs or without, so a replay runs the kernels the
// direct step runs, with the same arguments over the same shapes and buffers. (The GPT-OSS runner pads only when
// graphed, which is why its f32 verify steps with padding get 1e-5 there: its f32 attention splits keys by the
// step's token count.) Nothing on the path sums across rows in an order that depends on the run: the grouping by
// expert places rows by atomics, but the expert kernels sum each row's products in K order whatever its tile, and
// the combine adds a token's slots in slot order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "deepseek_test_util.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/deepseek_cuda_runner.h"
#include "runner_compare.h"

namespace moeserve {
namespace {

struct GraphCase {
  std::string precision, kv_cache_dtype;
  std::string name() const { return precision + (kv_cache_dtype == "auto" ? "" : "_kv_" + kv_cache_dtype); }
};

std::unique_ptr<ModelRunner> runner_with_graphs(const GraphCase& c, bool graphs) {
  CudaRunnerOptions options;
  options.precision = c.precision;
  options.kv_cache_dtype = c.kv_cache_dtype;
  options.deepseek_experts = "v1";
  options.deepseek_graphs = graphs ? "on" : "off";
  return make_deepseek_cuda_runner(testing::small_deepseek_checkpoint(), options);
}

// Every step's logits, then every captured row, of the schedule below.
struct ScheduleOutput {
  std::vector<float> logits, captured;
};

// A prefill step of three prompts (20, 35 and 60 tokens: not graph-shaped), then phases of graph-shaped steps.
ScheduleOutput run_schedule(ModelRunner& runner) {
  struct Phase {
    std::vector<int> sequences;
    int tokens, steps;
  };
  const std::vector<Phase> phases = {
      {{0, 1, 2}, 1, 24},  // bucket 4 with a padding sequence; sequence 2 crosses 64 (the bf16 path's first bucket)
      {{0, 1}, 1, 8},      // bucket 2
      {{2}, 1, 8},         // bucket 1
      {{0, 1, 2}, 4, 6},   // verify-shaped: bucket 4, 4 tokens and 4 logits rows a sequence, the last layer captured
      {{0, 2}, 4, 6},      // bucket 2 of 4 tokens; sequence 2 crosses 128
      {{0, 1, 2}, 1, 24},  // bucket 4 again, its graph captured for the new context bucket, then replayed
  };
  const int vocab = runner.config().vocab_size, block_size = 16, blocks_a_sequence = 13, last_layer =
      runner.config().num_layers - 1;
  const std::vector<int> prompt_lengths = {20, 35, 60};
  std::vector<std::vector<int32_t>> tokens, tables(3);
  for (int s = 0; s < 3; ++s) tokens.push_back(testing::prompt(blocks_a_sequence * block_size, 21 + s, vocab));
  std::vector<int32_t> pool(3 * blocks_a_sequence);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(17));
  for (int s = 0; s < 3; ++s)
    tables[s].assign(pool.begin() + s * blocks_a_sequence, pool.begin() + (s + 1) * blocks_a_sequence);
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(pool.size())});

  ScheduleOutput out;
  std::vector<int> done(3, 0);
  auto step = [&](const std::vector<int>& sequences, const std::vector<int>& counts, bool capture) {
    ForwardBatch batch;
    if (capture) batch.capture_layers = {last_layer};
    for (size_t i = 0; i < sequences.size(); ++i) {
      const int s = sequences[i], n = counts[i];
      SequenceStep step;
      step.tokens = std::span(tokens[s]).subspan(done[s], n);
      step.start_position = done[s];
      step.block_tables = {tables[s]};
      step.num_logits = capture ? n : 1;
      batch.sequences.push_back(step);
      done[s] += n;
    }
    ForwardOutput result;
    runner.forward(batch, result);
    out.logits.insert(out.logits.end(), result.logits.begin(), result.logits.end());
    for (const std::vector<float>& rows : result.captured) out.captured.insert(out.captured.end(), rows.begin(), rows.end());
  };
  step({0, 1, 2}, prompt_lengths, false);
  for (const Phase& phase : phases)
    for (int i = 0; i < phase.steps; ++i)
      step(phase.sequences, std::vector<int>(phase.sequences.size(), phase.tokens), phase.tokens > 1);
  EXPECT_EQ(done, (std::vector<int>{124, 115, 164}));
  return out;
}

class DeepseekCudaGraphs : public ::testing::TestWithParam<GraphCase> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
};

TEST_P(DeepseekCudaGraphs, GraphedStepsEqualDirectSteps) {
  auto graphed = runner_with_graphs(GetParam(), true), direct = runner_with_graphs(GetParam(), false);
  const ScheduleOutput want = run_schedule(*direct), got = run_schedule(*graphed);
  const auto& graphed_runner = dynamic_cast<const cuda::DeepseekCudaRunner&>(*graphed);
  EXPECT_TRUE(graphed_runner.cuda_graphs());
  EXPECT_GT(graphed_runner.captured_graphs(), 0u) << "no graph held: were the steps graphed?";
  EXPECT_EQ(dynamic_cast<const cuda::DeepseekCudaRunner&>(*direct).captured_graphs(), 0u);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  ASSERT_EQ(got.captured.size(), want.captured.size());
  EXPECT_GT(got.captured.size(), 0u);
  const testing::RowErrors e = testing::row_errors(got.logits, want.logits, graphed->config().vocab_size);
  std::printf("graphed against direct %s: %d logits rows, worst %.3e\n", GetParam().name().c_str(), e.rows, e.worst);
  EXPECT_TRUE(got.logits == want.logits) << "logits differ: worst row " << e.worst;
  EXPECT_TRUE(got.captured == want.captured) << "captured rows differ";
}

// The kernel timer (deepseek_layer_bench --breakdown): while it is on, forward() runs graph-shaped steps ungraphed and
// every class of a prefill step and of a decode step gets time; the classes tile the step (their sum is inside
// forward()'s wall time); turned off, steps are graphed again and nothing is added.
TEST(DeepseekCudaTimer, KernelTimerAccountsForEveryClassOfAStep) {
  MOESERVE_REQUIRE_CUDA();
  auto owned = runner_with_graphs({"bf16", "auto"}, true);
  auto& runner = dynamic_cast<cuda::DeepseekCudaRunner&>(*owned);
  const int vocab = runner.config().vocab_size;
  const std::vector<int32_t> prompt = testing::prompt(80, 5, vocab);
  std::vector<int32_t> table(8);
  std::iota(table.begin(), table.end(), 0);
  runner.allocate_kv_cache({16, 8});
  auto step = [&](int start, int n) {
    ForwardOutput out;
    runner.forward(testing::one_sequence_step(prompt, start, n, table), out);
  };
  using cuda::KernelClass;
  // Classes of kernels every step runs (the metadata upload may copy nothing on a step whose words did not grow).
  const std::vector<KernelClass> every_step = {
      KernelClass::embedding,   KernelClass::norm,        KernelClass::qkv_projection, KernelClass::rope_kv_write,
      KernelClass::output_projection, KernelClass::router, KernelClass::grouping,     KernelClass::expert_mlp1,
      KernelClass::expert_mlp2, KernelClass::dense_mlp,   KernelClass::expert_combine, KernelClass::unembedding,
      KernelClass::sampling};
  runner.kernel_timer().set_enabled(true);
  step(0, 60);
  const cuda::KernelTimes prefill = runner.kernel_timer().totals();
  EXPECT_EQ(prefill.steps, 1);
  for (KernelClass c : every_step) EXPECT_GT(prefill.ms[static_cast<int>(c)], 0.0) << cuda::kernel_class_name(c);
  EXPECT_GT(prefill.ms[static_cast<int>(KernelClass::metadata_upload)], 0.0);
  // The prompt's attention: the expanded form (expansion, then prefill attention) where the runner takes it, else
  // the absorbed one (timed as decode attention).
  const double attention = prefill.ms[static_cast<int>(KernelClass::attention_prefill)] +
                           prefill.ms[static_cast<int>(KernelClass::attention_decode)];
  EXPECT_GT(attention, 0.0);
  EXPECT_EQ(prefill.ms[static_cast<int>(KernelClass::latent_expansion)] > 0,
            prefill.ms[static_cast<int>(KernelClass::attention_prefill)] > 0);
  EXPECT_GT(prefill.gpu_ms(), 0.0);
  EXPECT_LE(prefill.gpu_ms(), prefill.host_ms * 1.001);
  for (int i = 0; i < 4; ++i) step(60 + i, 1);  // graph-shaped decode steps, timed: not graphed
  const cuda::KernelTimes& all = runner.kernel_timer().totals();
  EXPECT_EQ(all.steps, 5);
  EXPECT_EQ(runner.captured_graphs(), 0u);
  for (KernelClass c : every_step)
    EXPECT_GT(all.ms[static_cast<int>(c)], prefill.ms[static_cast<int>(c)]) << cuda::kernel_class_name(c);
  EXPECT_GT(all.ms[static_cast<int>(KernelClass::attention_decode)],
            prefill.ms[static_cast<int>(KernelClass::attention_decode)]);
  EXPECT_LE(all.gpu_ms(), all.host_ms * 1.001);
  runner.kernel_timer().set_enabled(false);
  step(64, 1);
  EXPECT_EQ(runner.kernel_timer().totals().steps, 5);
  EXPECT_GT(runner.captured_graphs(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Paths, DeepseekCudaGraphs,
                         ::testing::Values(GraphCase{"f32", "auto"}, GraphCase{"bf16", "auto"},
                                           GraphCase{"bf16", "fp8_e4m3"}),
                         [](const ::testing::TestParamInfo<GraphCase>& info) { return info.param.name(); });

}  // namespace
}  // namespace moeserve
