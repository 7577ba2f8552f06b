// What the benchmarks rely on: the kernel timer accounts for a step's GPU time class by class, and the synthetic
// router's Zipf option makes some experts hot where random weights route near uniformly.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"
#include "runner/cuda/cuda_runner.h"

namespace moeserve {
namespace {

using cuda::KernelClass;

// A decode step of `batch` sequences at position `context` over fresh KV blocks.
struct DecodeStep {
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> tokens;
  SamplingParams greedy;
  ForwardBatch batch;
  DecodeStep(const ModelConfig& c, int batch_size, int context) {
    const int groups = kv_groups_of(c).num_groups(), blocks = context / 16 + 1;
    greedy.temperature = 0.0f;
    tokens.resize(batch_size);
    for (int s = 0; s < batch_size; ++s) tokens[s] = (s * 7919 + 13) % c.vocab_size;
    for (int s = 0; s < batch_size * groups; ++s) {
      tables.emplace_back(blocks);
      std::iota(tables.back().begin(), tables.back().end(), s * blocks);
    }
    batch.return_logits = false;
    for (int s = 0; s < batch_size; ++s) {
      SequenceStep step;
      step.tokens = std::span(tokens).subspan(s, 1);
      step.start_position = context;
      for (int g = 0; g < groups; ++g) step.block_tables.emplace_back(tables[s * groups + g]);
      step.sampling = &greedy;
      batch.sequences.push_back(std::move(step));
    }
  }
  int64_t blocks() const { return static_cast<int64_t>(tables.size() * tables.front().size()); }
};

std::unique_ptr<cuda::CudaRunner> synthetic_20b(const std::string& router) {
  CudaRunnerOptions options;
  options.synthetic_router = router;
  auto owned = make_synthetic_cuda_runner("gpt-oss-20b", 3, options);
  return std::unique_ptr<cuda::CudaRunner>(dynamic_cast<cuda::CudaRunner*>(owned.release()));
}

TEST(CudaInstrumentation, KernelTimerAccountsForEveryClassOfAStep) {
  MOESERVE_REQUIRE_CUDA();
  auto runner = synthetic_20b("uniform");
  DecodeStep step(runner->config(), 8, 300);
  runner->allocate_kv_cache({16, step.blocks()});
  runner->fill_kv_cache_random(5);
  ForwardOutput out;
  runner->kernel_timer().set_enabled(true);
  for (int i = 0; i < 3; ++i) runner->forward(step.batch, out);
  const cuda::KernelTimes& times = runner->kernel_timer().totals();
  EXPECT_EQ(times.steps, 3);
  for (KernelClass c : {KernelClass::embedding, KernelClass::norm, KernelClass::qkv_projection,
                        KernelClass::rope_kv_write, KernelClass::attention_decode, KernelClass::output_projection,
                        KernelClass::router, KernelClass::grouping, KernelClass::expert_mlp1, KernelClass::expert_mlp2,
                        KernelClass::unembedding, KernelClass::sampling, KernelClass::metadata_upload})
    EXPECT_GT(times.ms[static_cast<int>(c)], 0.0) << cuda::kernel_class_name(c);
  EXPECT_EQ(times.ms[static_cast<int>(KernelClass::attention_prefill)], 0.0);  // a decode step
  // The classes tile the step: their sum is the GPU time, which forward()'s wall time contains.
  EXPECT_GT(times.gpu_ms(), 0.0);
  EXPECT_LE(times.gpu_ms(), times.host_ms * 1.001);
  // Timing off: steps are graphed again and nothing is added.
  runner->kernel_timer().set_enabled(false);
  runner->forward(step.batch, out);
  EXPECT_EQ(runner->kernel_timer().totals().steps, 3);
}

double hottest_over_mean(const std::vector<int32_t>& rows) {
  const double mean = std::accumulate(rows.begin(), rows.end(), 0.0) / rows.size();
  return *std::max_element(rows.begin(), rows.end()) / mean;
}

TEST(CudaInstrumentation, ZipfRouterMakesSomeExpertsHot) {
  MOESERVE_REQUIRE_CUDA();
  double ratio[2];
  for (int i = 0; i < 2; ++i) {
    auto runner = synthetic_20b(i == 0 ? "uniform" : "zipf:1");
    DecodeStep step(runner->config(), 256, 40);
    runner->allocate_kv_cache({16, step.blocks()});
    runner->fill_kv_cache_random(5);
    ForwardOutput out;
    runner->forward(step.batch, out);
    const std::vector<int32_t> rows = runner->last_layer_expert_rows();
    EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), 0), 256 * runner->config().experts_per_token);
    ratio[i] = hottest_over_mean(rows);
    std::printf("hottest expert / mean, router %s: %.2f\n", i == 0 ? "uniform" : "zipf:1", ratio[i]);
  }
  // Random router weights and biases already make the hottest of 32 experts a few times the mean (3.75 at 1,024
  // rows on an H200); the Zipf offsets must make it clearly hotter.
  EXPECT_GT(ratio[1], 1.5 * ratio[0]);
}

}  // namespace
}  // namespace moeserve
