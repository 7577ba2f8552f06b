// The attention kernels against cpu::attend_one_head, over a paged cache filled with random keys and values:
// several sequences of different lengths at once, scattered blocks (given back, -1, before a sliding window),
// sinks, GQA groups of 8 (GPT-OSS), 4, 2 (the tiny model) and 1, full and sliding layers, bf16 and fp8 e4m3 KV
// (stored with K and V scales other than 1; the reference reads the dequantised values). Every cached slot no
// query may see (before the first token's window, past the context in the last block) holds NaN, so a kernel that
// lets one into a product fails. The decode kernel takes any query length (its groups hold 16 / heads-per-KV
// tokens), the prefill kernel chunks that straddle its 64-row query tiles, a mixed step both over disjoint
// tokens; the fp32 path's kernel takes everything. The prefill kernel also takes the shapes at its own edges:
// query counts at its warpgroup (64 / G tokens), block and tile boundaries, contexts at 16-key block and 128-key
// tile boundaries, chunks starting mid-context and mid-block, windows shorter and longer than a key tile, more key
// tiles than pipeline stages.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "model/fp8_blocks.h"
#include "model/gpt_oss/make_tiny.h"
#include "runner/cpu/ops.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;

struct AttentionCase {
  std::string name;
  int heads, kv_heads;
  std::vector<int> contexts;  // keys each sequence has after the step
  std::vector<int> q_lens;    // query tokens of the step (the last q_len positions)
  int window = 128;           // of the sliding layer
};

// Which launches run: decode groups for every sequence, prefill tiles for every sequence, both as a mixed step
// splits them, or the fp32 kernel for every token.
enum class Path { decode, prefill, mixed, decode_f32 };

struct Kernel {
  Path path;
  KvDtype kv;
  int forced_splits = 0;  // decode: the launch's most splits (0: the runner's choice)
  int launches = 1;       // decode: run this often with the same scratch (its counters must come back to zero)
  int prefill_blocks = 0;  // prefill: blocks sharing the launch's units (0: the built-in choice)
  bool e4m3_out = false;   // prefill: the output quantised (AttentionParams::out_e4m3), dequantised for the check
};

constexpr float kKScale = 0.5f, kVScale = 2.0f;  // fp8 scales: neither is 1, so a missing factor shows

const char* kv_name(KvDtype kv) { return kv == KvDtype::f32 ? "f32" : kv == KvDtype::bf16 ? "bf16" : "fp8"; }

int multiprocessors() {
  int count = 0;
  MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0));
  return count;
}

// Runs one kernel over a case on a full (layer 1) or sliding (layer 0) layer and returns ||out - ref|| / ||ref||.
double attention_error(const AttentionCase& ac, const Kernel& kernel, bool sliding, std::mt19937& rng) {
  TinyModelOptions options;
  options.layers = 2;  // group 0 sliding, group 1 full
  options.heads = ac.heads;
  options.kv_heads = ac.kv_heads;
  options.window = ac.window;
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
  const int prefill_min_rows = kernel.path == Path::prefill ? 1
                               : kernel.path == Path::mixed ? cuda::kPrefillAttentionRows
                                                            : cuda::kNoPrefillTiles;
  testing::DeviceStep device_step(batch, c, layout, prefill_min_rows);
  const int T = device_step.meta.num_tokens();

  const size_t block_elements = 2 * static_cast<size_t>(c.num_kv_heads) * block_size * D;
  const size_t half_block = block_elements / 2;  // K, then V
  const cuda::Precision precision = kernel.kv == KvDtype::f32 ? cuda::Precision::f32 : cuda::Precision::bf16;
  std::vector<float> cache = testing::random_floats(rng, num_blocks * block_elements);
  // Slots of the tables' blocks that no query of the step sees: NaN (e4m3's NaN is 0x7f).
  std::vector<size_t> unseen;
  for (const bool sliding_group : {true, false})
    for (int s = 0; s < S; ++s) {
      const auto& table = (sliding_group ? sliding_tables : full_tables)[s];
      const int first = sliding_group ? std::max(0, starts[s] - c.sliding_window + 1) : 0;
      for (size_t b = 0; b < table.size(); ++b)
        for (int row = 0; row < block_size && table[b] >= 0; ++row) {
          const int position = static_cast<int>(b) * block_size + row;
          if (position >= first && position < ac.contexts[s]) continue;
          for (int which = 0; which < 2; ++which)
            for (int kv_head = 0; kv_head < c.num_kv_heads; ++kv_head)
              for (int d = 0; d < D; ++d)
                unseen.push_back(table[b] * block_elements + ((which * c.num_kv_heads + kv_head) * block_size + row) * D + d);
        }
    }
  DeviceBuffer cache_d;
  if (kernel.kv == KvDtype::fp8_e4m3) {
    auto stored = testing::to_e4m3(cache, [&](size_t i) { return (i / half_block) % 2 == 0 ? kKScale : kVScale; });
    for (size_t i : unseen) stored[i] = 0x7f;
    cache = testing::from_e4m3(stored, [&](size_t i) { return (i / half_block) % 2 == 0 ? kKScale : kVScale; });
    cache_d = cuda::to_device(stored);
  } else {
    for (size_t i : unseen) cache[i] = NAN;
    cache = testing::round_to(precision, cache);
    cache_d = testing::upload_as(precision, cache);
  }
  const auto q = testing::round_to(precision, testing::random_floats(rng, static_cast<size_t>(T) * c.num_heads * D));
  const auto sinks = testing::random_floats(rng, c.num_heads);
  DeviceBuffer q_d = testing::upload_as(precision, q), sinks_d = cuda::to_device(sinks),
               out_d(static_cast<size_t>(T) * c.num_heads * D * cuda::element_bytes(precision));
  MOESERVE_CUDA_CHECK(cudaMemset(out_d.get(), 0xff, out_d.bytes()));  // NaNs where a token is never written
  const int group = sliding ? 0 : 1;
  const bool fp8 = kernel.kv == KvDtype::fp8_e4m3;
  cuda::AttentionParams params{q_d.get(), out_d.get(), sinks_d.as<float>(), c.attention_scale(), c.num_heads,
                               c.num_kv_heads, D, sliding ? c.sliding_window : 0,
                               cuda::KvView{cache_d.get(), block_size, 1, c.num_kv_heads, D, kernel.kv}, group, 0,
                               fp8 ? kKScale : 1.0f, fp8 ? kVScale : 1.0f};
  const int64_t scale_rows = T + 3;  // more than the step's tokens, as the padded product's scales are
  DeviceBuffer e4m3_d(kernel.e4m3_out ? static_cast<size_t>(T) * c.num_heads * D : 0),
      e4m3_scales_d(kernel.e4m3_out ? scale_rows * (c.num_heads / 2) * 4 : 0);
  if (kernel.e4m3_out) {
    MOESERVE_CUDA_CHECK(cudaMemset(e4m3_d.get(), 0x7f, e4m3_d.bytes()));  // e4m3 NaN where a value is not written
    MOESERVE_CUDA_CHECK(cudaMemset(e4m3_scales_d.get(), 0xff, e4m3_scales_d.bytes()));
    params.out_e4m3 = e4m3_d.as<uint8_t>();
    params.out_scales = e4m3_scales_d.as<float>();
    params.out_scale_rows = scale_rows;
  }
  if (kernel.path == Path::decode_f32) {
    const int splits = cuda::attention_decode_f32_splits(T, c.num_kv_heads, multiprocessors());
    DeviceBuffer partial(static_cast<size_t>(T) * c.num_heads * splits * (D + 2) * 4);
    cuda::launch_attention_decode_f32(nullptr, params, device_step.view, splits, partial.as<float>());
  } else {
    if (kernel.path != Path::decode)
      cuda::launch_attention_prefill(nullptr, params, device_step.view, kernel.prefill_blocks);
    const int units = device_step.meta.num_decode_groups() * c.num_kv_heads;
    const int splits = kernel.forced_splits > 0
                           ? kernel.forced_splits
                           : cuda::attention_decode_max_splits(kernel.kv, c.heads_per_kv(), units, multiprocessors());
    DeviceBuffer partial(std::max<size_t>(cuda::attention_decode_partial_floats(units, splits) * 4, 16)),
        counters(std::max(units, 1) * 4);
    MOESERVE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
    const cuda::DecodeScratch scratch{splits, partial.as<float>(), counters.as<int32_t>()};
    for (int i = 0; i < kernel.launches; ++i) cuda::launch_attention_decode(nullptr, params, device_step.view, scratch);
    MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto left = cuda::to_host<int32_t>(counters.get(), std::max(units, 1));
    EXPECT_EQ(left, std::vector<int32_t>(left.size(), 0)) << "split counters after " << kernel.launches << " launches";
  }
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  auto out = testing::download_as(precision, out_d.get(), static_cast<size_t>(T) * c.num_heads * D);
  if (kernel.e4m3_out) {  // value = e4m3 byte x its group's scale (two heads of a token)
    const auto bytes = cuda::to_host<uint8_t>(e4m3_d.get(), out.size());
    const auto scales = cuda::to_host<float>(e4m3_scales_d.get(), scale_rows * (c.num_heads / 2));
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < c.num_heads; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t i = (static_cast<size_t>(t) * c.num_heads + h) * D + d;
          out[i] = fp8_e4m3_to_float(bytes[i]) * scales[static_cast<size_t>(h / 2) * scale_rows + t];
        }
  }

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
      {"gqa8 short runs", 64, 8, {5, 300, 2000, 40, 17}, {3, 15, 8, 2, 16}},
      {"gqa4 short runs", 16, 4, {9, 500, 77}, {5, 1, 12}},
      {"gqa2 prefill", 4, 2, {40, 7, 300}, {40, 7, 17}},
      {"gqa1 short runs", 4, 4, {30, 260, 16}, {15, 9, 16}},
  };
  return all;
}

// The prefill kernel's edges (names say which), full and sliding layers: a warpgroup holds 64 / G tokens, a block
// two warpgroups, a query tile 64 tokens; keys come in 16-key blocks and 128-key tiles through 4 stages.
const std::vector<AttentionCase>& prefill_edge_cases() {
  static const std::vector<AttentionCase> all = {
      {"gqa8 query tiles and warpgroups", 64, 8, {64, 65, 7, 9, 200, 500}, {64, 65, 7, 9, 127, 129}},
      {"gqa8 block and key-tile edges", 64, 8, {16, 17, 15, 128, 129, 256, 257}, {16, 17, 15, 128, 20, 40, 33}},
      {"gqa8 window 32", 64, 8, {300, 90, 1000, 33}, {100, 90, 64, 33}, 32},
      {"gqa8 window 200", 64, 8, {700, 300, 201}, {200, 300, 201}, 200},
      {"gqa8 more tiles than stages", 16, 2, {2100, 1000}, {600, 20}},
      {"gqa4 mid-context", 16, 4, {777, 64, 40}, {100, 64, 33}},
      {"gqa2 window 64", 4, 2, {400, 129}, {150, 129}, 64},
      {"gqa1 second warpgroup idle", 4, 4, {130, 65, 300}, {130, 65, 70}},
  };
  return all;
}

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override { MOESERVE_REQUIRE_CUDA(); }
  void expect_all_cases(const std::string& label, const Kernel& kernel, double bound,
                        const std::vector<AttentionCase>& all = cases()) {
    for (const auto& ac : all)
      for (bool sliding : {false, true}) {
        const std::string what = "attention " + label + " " + kv_name(kernel.kv) + " " + ac.name +
                                 (sliding ? " sliding" : " full");
        testing::expect_error_within(what, attention_error(ac, kernel, sliding, rng_), bound);
      }
  }
  std::mt19937 rng_{::testing::UnitTest::GetInstance()->random_seed() + 99u};
};

// Bounds: q, K and V are exact inputs (bf16, or fp8 values the reference dequantises too); the output is rounded
// to bf16 (2^-9 relative) and the probabilities enter P.V as bf16 (2^-9 each; the decode kernel's fp8 path uses
// fp16, 2^-12), so 1e-2.
// fp32: the order of summation only.
TEST_F(CudaAttention, DecodeKernelMatchesCpu) {
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) expect_all_cases("decode-kernel", {Path::decode, kv}, 1e-2);
}

TEST_F(CudaAttention, DecodeKernelF32MatchesCpu) {
  expect_all_cases("decode-kernel-f32", {Path::decode_f32, KvDtype::f32}, 1e-5);
}

TEST_F(CudaAttention, PrefillKernelMatchesCpu) {
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) expect_all_cases("prefill-kernel", {Path::prefill, kv}, 1e-2);
}

TEST_F(CudaAttention, PrefillKernelEdgeShapesMatchCpu) {
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3})
    expect_all_cases("prefill-kernel", {Path::prefill, kv}, 1e-2, prefill_edge_cases());
}

// Blocks running several units in turn, their pipeline's stages and phases running on from one unit to the next
// (the built-in choice for sliding layers, one block a multiprocessor): 1 block takes every unit, 3 and 7 units of
// different lengths, more units than pipeline stages; full layers too, which the built-in choice gives one block a
// unit.
TEST_F(CudaAttention, PrefillKernelBlocksRunningUnitsInTurnMatchCpu) {
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3})
    for (int blocks : {1, 3, 7}) {
      Kernel kernel{Path::prefill, kv};
      kernel.prefill_blocks = blocks;
      expect_all_cases("prefill-kernel " + std::to_string(blocks) + " blocks", kernel, 1e-2, prefill_edge_cases());
    }
}

// The output quantised for the FP8 output projection (AttentionParams::out_e4m3; GQA groups of 8 and 2, the ones
// that pair heads): dequantised, within the bf16 bound plus one e4m3 rounding (2^-4 relative at most a value; the
// group's largest lands on 448 exactly), every value written (NaN bytes and scales otherwise).
TEST_F(CudaAttention, PrefillKernelE4m3OutputMatchesCpu) {
  std::vector<AttentionCase> even;
  for (const auto& all : {cases(), prefill_edge_cases()})
    for (const auto& ac : all)
      if (ac.heads / ac.kv_heads % 2 == 0) even.push_back(ac);
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3})
    for (int blocks : {0, 3}) {
      Kernel kernel{Path::prefill, kv};
      kernel.prefill_blocks = blocks;
      kernel.e4m3_out = true;
      expect_all_cases("prefill-kernel e4m3 out, blocks " + std::to_string(blocks), kernel, 1e-2 + 0.0625, even);
    }
}

// Long sequences through prefill tiles, short ones through decode groups, in one step: every token is written
// (the output starts as NaNs) and matches.
TEST_F(CudaAttention, MixedStepMatchesCpu) {
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) expect_all_cases("mixed-step", {Path::mixed, kv}, 1e-2);
}

// Split counts the runner would not choose: more than the keys have 64-key pieces (the kernel uses fewer), odd
// ones over long contexts (ranges that are not powers of two), the most, and one; each launched three times
// with the same counters, as a replayed graph does.
TEST_F(CudaAttention, DecodeKernelWithForcedSplits) {
  const std::vector<AttentionCase> split_cases = {{"gqa8 short", 64, 8, {3, 40}, {1, 1}},
                                                  {"gqa8 long", 64, 8, {2100, 1000, 129}, {1, 2, 1}}};
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3})
    for (int splits : {1, 3, 7, 32})
      for (const auto& ac : split_cases)
        for (bool sliding : {false, true}) {
          const std::string what = "attention decode-kernel " + std::string(kv_name(kv)) + " " + ac.name + " " +
                                   std::to_string(splits) + " splits x3" + (sliding ? " sliding" : " full");
          testing::expect_error_within(what, attention_error(ac, {Path::decode, kv, splits, 3}, sliding, rng_), 1e-2);
        }
}

}  // namespace
}  // namespace moeserve
