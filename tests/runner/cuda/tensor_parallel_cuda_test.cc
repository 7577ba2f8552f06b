// GPT-OSS split over ranks on the CUDA runner (tensor_parallel_cuda_runner.h) against the CPU runner, under the
// bounds a single CUDA runner is held to: logits of batched and chunked prompts, greedy continuations equal in
// fp32, and a malformed step refused before any rank starts, with the runner usable after it; tensor parallel and
// expert parallel (whole experts a rank, each grouping only the pairs routed to its own). The unembedding is split by
// vocabulary: greedy rows by the distributed argmax, returned logits, logprobs, edits, masks and sampled rows through
// whole rows gathered on the device, with unequal slices too (VocabularySplitRowsDrawAsOneGpu).
// On one GPU the ranks share it through a host-side communicator (SameDeviceGroup below: the collectives are host
// copies, so steps run without graphs); with two or more GPUs the product's NCCL group runs them, graphs included.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>

#include "cuda_test_util.h"
#include "engine/generate.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cuda/cuda_check.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/tensor_parallel_cuda_runner.h"
#include "runner/parallel/in_process_group.h"
#include "runner/sequence_step.h"
#include "sampling/sampler.h"
#include "runner_compare.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve {
namespace {

// Ranks that all run on device 0, each on its own stream: a collective waits for the rank's stream, sums or
// gathers on the host through an InProcessGroup, and copies the result back.
class SameDeviceGroup : public cuda::DeviceRankGroup {
 public:
  explicit SameDeviceGroup(int n) : host_(n), streams_(n, nullptr) {
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  }
  int size() const override { return host_.size(); }
  int device(int) const override { return 0; }
  Communicator& rank(int r) override { return *ranks_.at(r); }
  void use_stream(int r, cudaStream_t stream) override { streams_.at(r) = stream; }
  bool graph_capturable() const override { return false; }

 private:
  class Rank : public Communicator {
   public:
    Rank(SameDeviceGroup& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return group_.size(); }
    void all_reduce_sum(std::span<float> data) override {
      std::vector<float> host(data.size());
      copy_out(data.data(), host.data(), data.size_bytes());
      group_.host_.rank(rank_).all_reduce_sum(host);
      copy_in(host.data(), data.data(), data.size_bytes());
    }
    void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) override {
      std::vector<std::byte> host(mine.size()), host_all(all.size());
      copy_out(mine.data(), host.data(), mine.size());
      group_.host_.rank(rank_).all_gather(host, host_all);
      copy_in(host_all.data(), all.data(), all.size());
    }
    void abort(const std::string& why) override { group_.host_.rank(rank_).abort(why); }

   private:
    void copy_out(const void* device, void* host, size_t bytes) {
      cudaStream_t s = group_.streams_[rank_];
      MOESERVE_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s));
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    void copy_in(const void* host, void* device, size_t bytes) {
      cudaStream_t s = group_.streams_[rank_];
      MOESERVE_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s));
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    SameDeviceGroup& group_;
    int rank_;
  };

  InProcessGroup host_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// 8 query heads over 4 KV heads and 4 MXFP4 blocks of intermediate: splits over 2 and 4 ranks. The real vocabulary
// divides by 2 and 4; `vocab` 1,001 splits into unequal slices (501 / 500, 251 / 250 / 250 / 250).
std::shared_ptr<const Checkpoint> splittable_model(int vocab = 201088) {
  TinyModelOptions options;
  options.vocab = vocab;
  options.heads = 8;
  options.kv_heads = 4;
  options.intermediate = 128;
  return Checkpoint::open(testing::tiny_model(options));
}

std::unique_ptr<ModelRunner> same_device_runner(std::shared_ptr<const Checkpoint> checkpoint, int ranks,
                                                const std::string& precision_name, bool expert_parallel) {
  const cuda::Precision precision = precision_name == "f32" ? cuda::Precision::f32 : cuda::Precision::bf16;
  CudaRunnerOptions options;
  options.precision = precision_name;
  auto upload = [&](const ModelConfig& rank_config, const RankShard& shard) {
    return cuda::upload_rank_weights(*checkpoint, rank_config, shard, precision);
  };
  return cuda::make_tensor_parallel_cuda_runner(checkpoint->config(), {ranks, expert_parallel},
                                                std::make_unique<SameDeviceGroup>(ranks), upload, precision, options,
                                                {});
}

void expect_greedy_equal(ModelRunner& cpu, ModelRunner& gpu, const std::string& what) {
  GenerateOptions options;
  options.sampling.temperature = 0.0f;
  options.max_tokens = 32;
  options.prefill_chunk = 16;
  for (int salt : {1, 2}) {
    const auto p = testing::prompt(20 + 9 * salt, salt, cpu.config().vocab_size);
    EXPECT_EQ(generate_sequence(gpu, p, options).tokens, generate_sequence(cpu, p, options).tokens)
        << what << " prompt " << salt;
  }
}

struct Split {
  int ranks;
  std::string precision;
  bool expert_parallel = false;  // whole experts a rank (8 experts: 4 or 2 each), attention split as with TP
};

class TensorParallelCuda : public ::testing::TestWithParam<Split> {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
};

TEST_P(TensorParallelCuda, RanksSharingOneGpuMatchTheCpuRunner) {
  const auto [ranks, precision, expert_parallel] = GetParam();
  auto checkpoint = splittable_model();
  CpuRunner cpu(checkpoint, 0);
  auto gpu = same_device_runner(checkpoint, ranks, precision, expert_parallel);
  const int vocab = checkpoint->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {testing::prompt(70, 1, vocab), testing::prompt(9, 2, vocab),
                                                     testing::prompt(33, 3, vocab)};
  const testing::AllLogits expected = testing::run_prompts(cpu, prompts, 5), got = testing::run_prompts(*gpu, prompts, 5);
  testing::expect_logits_close("split logits batched", precision, got.batched, expected.batched, vocab);
  testing::expect_logits_close("split logits chunked", precision, got.chunked, expected.chunked, vocab);
  if (precision == "f32") expect_greedy_equal(cpu, *gpu, "split over one GPU");
}

TEST_P(TensorParallelCuda, AMalformedStepIsRefusedBeforeAnyRankRuns) {
  const auto [ranks, precision, expert_parallel] = GetParam();
  auto checkpoint = splittable_model();
  auto gpu = same_device_runner(checkpoint, ranks, precision, expert_parallel);
  gpu->allocate_kv_cache({16, 8});
  const std::vector<std::vector<int32_t>> tables(kv_groups_of(checkpoint->config()).num_groups(), {0, 1});
  const std::vector<int32_t> bad{1, checkpoint->config().vocab_size};
  ForwardBatch batch;
  batch.sequences.push_back(testing::sequence_step(bad, 0, tables, 1));
  ForwardOutput out;
  EXPECT_THROW(gpu->forward(batch, out), Error);
  const std::vector<int32_t> good{1, 2, 3};
  batch.sequences[0] = testing::sequence_step(good, 0, tables, 1);
  gpu->forward(batch, out);
  EXPECT_EQ(out.logits.size(), static_cast<size_t>(checkpoint->config().vocab_size));
}

INSTANTIATE_TEST_SUITE_P(Splits, TensorParallelCuda,
                         ::testing::Values(Split{2, "f32"}, Split{4, "f32"}, Split{2, "bf16"}, Split{4, "bf16"},
                                           Split{2, "f32", true}, Split{4, "f32", true}, Split{2, "bf16", true},
                                           Split{4, "bf16", true}),
                         [](const ::testing::TestParamInfo<Split>& info) {
                           return std::string(info.param.expert_parallel ? "ep" : "tp") +
                                  std::to_string(info.param.ranks) + "_" + info.param.precision;
                         });

// The unembedding split by vocabulary: in one step, a greedy row with a logit bias forcing its token, a sampled row
// under an allowed-token mask, and a prompt scored row by row whose last row draws, every row with top-5 logprobs
// (rows that gather whole logits), then greedy steps without logits (the distributed argmax alone), then a step
// that returns its logits with a greedy and a sampled row. Against the CPU runner in f32 (logits within 1e-4: the
// same tokens, logprobs within 1e-3); in both precisions, the tokens are those of the gathered rows: the greedy
// row's is their argmax, the sampled row's the CPU sampler's on them. A vocabulary of 1,001 makes unequal slices.
// `split(checkpoint)` makes the runner under test.
void expect_vocab_split_rows_draw_as_one_gpu(
    const std::string& precision,
    const std::function<std::unique_ptr<ModelRunner>(std::shared_ptr<const Checkpoint>)>& split) {
  for (const int V : {1001, 201088}) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    auto checkpoint = splittable_model(V);
    CpuRunner cpu(checkpoint, 0);
    auto gpu = split(checkpoint);
    const int groups = kv_groups_of(checkpoint->config()).num_groups();
    const KvCacheLayout layout{16, 64};
    cpu.allocate_kv_cache(layout);
    gpu->allocate_kv_cache(layout);
    const int32_t forced = V - 7;
    testing::ProcessedRowsStep first(V, groups, 4, forced);
    ForwardOutput want, got;
    cpu.forward(first.batch, want);
    gpu->forward(first.batch, got);
    ASSERT_EQ(got.rows, want.rows);
    EXPECT_TRUE(got.logits.empty());
    EXPECT_EQ(got.sampled[0], forced);
    EXPECT_TRUE((first.mask[got.sampled[1] / 32] >> (got.sampled[1] % 32)) & 1u);
    if (precision == "f32") testing::expect_logprobs_match(got, want);
    const auto& tables = first.tables;
    const SamplingParams& greedy = first.greedy;
    const SamplingParams& sampled = first.sampled;

    // Decode steps of the three sequences, greedy, no logits: the distributed argmax alone.
    std::vector<int32_t> next = {got.sampled[0], got.sampled[1], got.sampled[got.rows - 1]};
    std::vector<int32_t> positions = {20, 9, 17};
    for (int i = 0; i < 4; ++i) {
      ForwardBatch decode;
      decode.return_logits = false;
      for (int s = 0; s < 3; ++s) {
        decode.sequences.push_back(testing::sequence_step(std::span(next).subspan(s, 1), positions[s], tables[s], 1));
        decode.sequences.back().sampling = &greedy;
      }
      ForwardOutput cpu_out, gpu_out;
      cpu.forward(decode, cpu_out);
      gpu->forward(decode, gpu_out);
      EXPECT_TRUE(gpu_out.logits.empty());
      ASSERT_EQ(gpu_out.sampled.size(), 3u);
      if (precision == "f32") {
        EXPECT_EQ(gpu_out.sampled, cpu_out.sampled) << "decode step " << i;
      }
      for (int s = 0; s < 3; ++s) {
        // Both runners continue from the split runner's tokens, so their contexts stay the same.
        ASSERT_GE(gpu_out.sampled[s], 0);
        ASSERT_LT(gpu_out.sampled[s], V);
        ++positions[s];
      }
      next = gpu_out.sampled;
    }

    // Returned logits, a greedy and a sampled row: the tokens are those of the gathered whole rows.
    ForwardBatch both;
    both.return_logits = true;
    for (int s = 0; s < 2; ++s) {
      both.sequences.push_back(testing::sequence_step(std::span(next).subspan(s, 1), positions[s], tables[s], 1));
      both.sequences.back().sampling = s == 0 ? &greedy : &sampled;
      both.sequences.back().sample_index = 5;
    }
    ForwardOutput cpu_out, gpu_out;
    cpu.forward(both, cpu_out);
    gpu->forward(both, gpu_out);
    ASSERT_EQ(gpu_out.logits.size(), 2u * V);
    testing::expect_logits_close("vocab-split returned logits", precision, gpu_out.logits, cpu_out.logits, V);
    const std::span<const float> row0(gpu_out.logits.data(), V), row1(gpu_out.logits.data() + V, V);
    EXPECT_EQ(gpu_out.sampled[0], argmax(row0));
    EXPECT_EQ(gpu_out.sampled[1], sample_token(row1, sampled, 5));
    if (precision == "f32") {
      EXPECT_EQ(gpu_out.sampled, cpu_out.sampled);
    }
  }
}

TEST_P(TensorParallelCuda, VocabularySplitRowsDrawAsOneGpu) {
  const auto [ranks, precision, expert_parallel] = GetParam();
  expect_vocab_split_rows_draw_as_one_gpu(precision, [&](std::shared_ptr<const Checkpoint> checkpoint) {
    return same_device_runner(checkpoint, ranks, precision, expert_parallel);
  });
}

// The product's path: --tensor-parallel-size over the host's GPUs through NCCL, decode steps in CUDA graphs.
TEST(TensorParallelCudaNccl, SplitOverGpusMatchesTheCpuRunner) {
  MOESERVE_REQUIRE_CUDA();
  int count = 0;
  MOESERVE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "one GPU: the NCCL split needs two or more";
  auto checkpoint = splittable_model();
  CpuRunner cpu(checkpoint, 0);
  for (const std::string precision : {"f32", "bf16"}) {
    CudaRunnerOptions options;
    options.precision = precision;
    options.tensor_parallel_size = count >= 4 ? 4 : 2;
    auto gpu = make_cuda_runner(checkpoint, options);
    const int vocab = checkpoint->config().vocab_size;
    const std::vector<std::vector<int32_t>> prompts = {testing::prompt(70, 1, vocab), testing::prompt(9, 2, vocab)};
    const testing::AllLogits expected = testing::run_prompts(cpu, prompts, 5),
                             got = testing::run_prompts(*gpu, prompts, 5);
    testing::expect_logits_close("NCCL split logits", precision, got.batched, expected.batched, vocab);
    if (precision == "f32") expect_greedy_equal(cpu, *gpu, "NCCL split");
    options.expert_parallel = true;  // whole experts a GPU
    auto experts = make_cuda_runner(checkpoint, options);
    const testing::AllLogits got_ep = testing::run_prompts(*experts, prompts, 5);
    testing::expect_logits_close("NCCL expert-parallel logits", precision, got_ep.batched, expected.batched, vocab);
    if (precision == "f32") expect_greedy_equal(cpu, *experts, "NCCL expert parallel");
    // The vocabulary split's rows through NCCL: the decode steps' distributed argmax inside their graphs (the first
    // step of a batch size runs directly, then is captured; later ones replay), whole rows gathered after them.
    options.expert_parallel = false;
    expect_vocab_split_rows_draw_as_one_gpu(precision, [&](std::shared_ptr<const Checkpoint> checkpoint) {
      return make_cuda_runner(checkpoint, options);
    });
  }
}

}  // namespace
}  // namespace moeserve
