// The attention kernels against cpu::attend_one_head, over a paged cache filled with random keys and values:
// several sequences of different lengths at once, scattered blocks (given back, -1, before a sliding window),
// sinks, GQA groups of 8 (GPT-OSS) and 2 (the tiny model), full and sliding layers. The decode kernel takes
// one or many query tokens per sequence (it is also the fp32 path's prefill); the prefill kernel takes chunks
// that straddle its 64-row query tiles.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "model/make_tiny.h"
#include "runner/cpu/ops.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::Precision;

struct AttentionCase {
  std::string name;
  int heads, kv_heads;
  std::vector<int> contexts;  // keys each sequence has after the step
  std::vector<int> q_lens;    // query tokens of the step (the last q_len positions)
};

struct Kernel {
  Precision precision;
  bool prefill;
};

// Runs one kernel over a case on a full (layer 1) or sliding (layer 0) layer and returns ||out - ref|| / ||ref||.
double attention_error(const AttentionCase& ac, Kernel kernel, bool sliding, int forced_splits, std::mt19937& rng) {
  TinyModelOptions options;
  options.layers = 2;  // group 0 sliding, group 1 full
  options.heads = ac.heads;
  options.kv_heads = ac.kv_heads;
  options.window = 128;
  options.vocab = 1000;
  const ModelConfig c = tiny_model_config(options);
  const int D = c.head_dim, block_size = 16, S = static_cast<int>(ac.contexts.size());
  std::vector<int> starts;
  for (int s = 0; s < S; ++s) starts.push_back(ac.contexts[s] - ac.q_lens[s]);
  int64_t sliding_blocks = 0, full_blocks = 0;
  auto sliding_tables = testing::scattered_tables(rng, starts, ac.contexts, c.sliding_window, block_size, &sliding_blocks);
  auto full_tables = testing::scattered_tables(rng, starts, ac.contexts, 0, block_size, &full_blocks);
  for (auto& table : full_tables)
    for (auto& b : table) b += static_cast<int32_t>(sliding_blocks);
  const int64_t num_blocks = sliding_blocks + full_blocks;

  ForwardBatch batch;
  std::vector<std::vector<int32_t>> ids(S);
  for (int s = 0; s < S; ++s) {
    ids[s].assign(ac.q_lens[s], 1);
    SequenceStep step;
    step.tokens = ids[s];
    step.start_position = starts[s];
    step.block_tables = {sliding_tables[s], full_tables[s]};
    batch.sequences.push_back(step);
  }
  const KvCacheLayout layout{block_size, num_blocks};
  testing::DeviceStep device_step(batch, c, layout, kernel.prefill);
  const int T = device_step.meta.num_tokens();

  const size_t block_elements = 2 * static_cast<size_t>(c.num_kv_heads) * block_size * D;
  const auto cache = testing::round_to(kernel.precision, testing::random_floats(rng, num_blocks * block_elements));
  const auto q = testing::round_to(kernel.precision, testing::random_floats(rng, static_cast<size_t>(T) * c.num_heads * D));
  const auto sinks = testing::random_floats(rng, c.num_heads);
  DeviceBuffer cache_d = testing::upload_as(kernel.precision, cache), q_d = testing::upload_as(kernel.precision, q),
               sinks_d = cuda::to_device(sinks),
               out_d(static_cast<size_t>(T) * c.num_heads * D * cuda::element_bytes(kernel.precision));
  const int group = sliding ? 0 : 1;
  cuda::AttentionParams params{q_d.get(), out_d.get(), sinks_d.as<float>(), c.attention_scale(), c.num_heads,
                               c.num_kv_heads, D, sliding ? c.sliding_window : 0,
                               cuda::KvView{cache_d.get(), block_size, 1, c.num_kv_heads, D}, group, 0};
  if (kernel.prefill) {
    cuda::launch_attention_prefill(nullptr, params, device_step.view);
  } else {
    const int splits = forced_splits > 0 ? forced_splits : cuda::attention_decode_splits(T, c.num_kv_heads, 132);
    DeviceBuffer partial(static_cast<size_t>(T) * c.num_heads * splits * (D + 2) * 4);
    cuda::launch_attention_decode(nullptr, kernel.precision, params, device_step.view, splits, partial.as<float>());
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = testing::download_as(kernel.precision, out_d.get(), static_cast<size_t>(T) * c.num_heads * D);

  std::vector<float> ref(out.size());
  std::vector<float> scores;
  const auto& tables = sliding ? sliding_tables : full_tables;
  auto at = [&](int s, int position, int which, int kv_head) {
    const size_t block = tables[s][position / block_size];
    return cache.data() + block * block_elements + ((which * c.num_kv_heads + kv_head) * block_size + position % block_size) * D;
  };
  int t = 0;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < ac.q_lens[s]; ++i, ++t) {
      const int p = starts[s] + i;
      const int lo = sliding ? std::max(0, p - c.sliding_window + 1) : 0;
      scores.resize(p - lo + 1);
      for (int h = 0; h < c.num_heads; ++h) {
        const int kv_head = h / c.heads_per_kv();
        cpu::attend_one_head(
            q.data() + (static_cast<size_t>(t) * c.num_heads + h) * D, D, p - lo + 1,
            [&](int64_t j) { return at(s, lo + static_cast<int>(j), 0, kv_head); },
            [&](int64_t j) { return at(s, lo + static_cast<int>(j), 1, kv_head); }, sinks[h], c.attention_scale(),
            scores.data(), ref.data() + (static_cast<size_t>(t) * c.num_heads + h) * D);
      }
    }
  return testing::relative_error(out, ref);
}

const std::vector<AttentionCase>& cases() {
  static const std::vector<AttentionCase> all = {
      {"gqa8 decode", 64, 8, {1, 100, 700, 2100}, {1, 1, 1, 1}},
      {"gqa8 prefill", 64, 8, {1, 100, 200, 1300}, {1, 100, 64, 130}},
      {"gqa2 prefill", 4, 2, {40, 7, 300}, {40, 7, 17}},
  };
  return all;
}

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 99u};
};

TEST_F(CudaAttention, DecodeKernelMatchesCpu) {
  for (Precision precision : {Precision::bf16, Precision::f32})
    for (const auto& ac : cases())
      for (bool sliding : {false, true}) {
        // bf16: only the output is rounded (inputs are bf16 already); fp32: summation order only.
        const double bound = precision == Precision::bf16 ? 4e-3 : 1e-5;
        const std::string what = "attention decode-kernel " + std::string(testing::precision_name(precision)) + " " +
                                 ac.name + (sliding ? " sliding" : " full");
        testing::expect_error_within(what, attention_error(ac, {precision, false}, sliding, 0, rng_), bound);
      }
}

TEST_F(CudaAttention, DecodeKernelWithMoreSplitsThanKeys) {
  const AttentionCase ac{"gqa8 short", 64, 8, {3, 40}, {1, 1}};
  testing::expect_error_within("attention decode-kernel bf16 32 splits",
                               attention_error(ac, {Precision::bf16, false}, false, 32, rng_), 4e-3);
}

TEST_F(CudaAttention, PrefillKernelMatchesCpu) {
  for (const auto& ac : cases())
    for (bool sliding : {false, true}) {
      // The probabilities enter the P.V product as bf16 (2^-9 relative each), on top of the output rounding.
      const std::string what = "attention prefill-kernel bf16 " + ac.name + (sliding ? " sliding" : " full");
      testing::expect_error_within(what, attention_error(ac, {Precision::bf16, true}, sliding, 0, rng_), 1e-2);
    }
}

}  // namespace
}  // namespace moeserve
