// Attention alone on one layer of gpt-oss-120b's shape (64 query heads, 8 KV heads of 64 dims, sinks, paged KV in
// blocks of 16 scattered over the pool), against ceilings measured in the same run:
//   decode (a full layer): one token per sequence at batch 1, 8, 64, 256, 1,024 and contexts 1k, 2k, 8k, bf16 and fp8 e4m3 KV
//     (random values filled on the device, never zeros); GB/s = the K and V rows read (each once per GQA group:
//     batch x context x 8 KV heads x 2 x 64 elements) over the kernel's time, against the device-to-device copy
//     bandwidth (bytes read + written);
//   prefill: one causal 8,192-token prompt (its keys already cached, as a chunk sees them) on a full layer and on a
//     sliding one (window 128), bf16 and fp8 KV, through the runner's kernel (version 2, wgmma) and version 1
//     (mma.sync, attention_prefill_v1.cu) beside it; FLOP/s = 4 x 64 heads x 64 dims x the visible (query, key)
//     pairs over the time, against cuBLASLt's bf16 matrix rate; and version 2's output against version 1's
//     (||v2 - v1|| / ||v1||, with any non-finite output counted), so the run checks what it times.
// Times are CUDA events around `--reps` launches after 3 warm-ups. Prints one line per figure, then a table; exits
// 1 when the prefill versions disagree.
//   attention_bench [--json FILE] [--reps N] [--batches 1,8,...] [--contexts 1024,...]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>

#include "attention_prefill_v1.h"
#include "bench_common.h"
#include "model/gpt_oss/make_tiny.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/step_metadata.h"
#include "util/error.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;

constexpr int kBlockSize = 16;
// Each version is within 1e-2 of cpu::attend_one_head (tests/runner/cuda/attention_test.cc), so within 2e-2 of
// each other; more means one of them is wrong.
constexpr double kMaxVersionDifference = 2e-2;

struct Row {
  std::string kernel, kv;
  int batch = 0, context = 0, splits = 0;
  double us = 0, rate = 0, of_ceiling = 0;  // rate: GB/s (decode) or TFLOP/s (prefill)
  double vs_v1 = -1;  // prefill version 2: ||out - version 1's|| / ||version 1's|| (-1: not compared)
};

const char* kv_name(KvDtype kv) { return kv == KvDtype::bf16 ? "bf16" : "fp8"; }

// Sequences of `lengths` tokens this step, each at context `context` (its last `length` positions), over
// shuffled blocks of a pool of `pool_blocks`.
struct Step {
  cuda::StepMetadata meta;
  DeviceBuffer device;
  cuda::StepView view;
};
void build_step(Step& step, const ModelConfig& c, const std::vector<int>& lengths, int context, int64_t pool_blocks,
                int prefill_min_rows) {
  const KvGroups groups = kv_groups_of(c);
  const int blocks_each = (context + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> pool(pool_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
  std::vector<std::vector<int32_t>> ids, tables;
  ForwardBatch batch;
  for (size_t s = 0; s < lengths.size(); ++s) {
    ids.emplace_back(lengths[s], 1);
    tables.emplace_back(pool.begin() + s * blocks_each, pool.begin() + (s + 1) * blocks_each);
  }
  for (size_t s = 0; s < lengths.size(); ++s) {
    SequenceStep seq;
    seq.tokens = ids[s];
    seq.start_position = context - lengths[s];
    seq.block_tables.assign(groups.num_groups(), tables[s]);  // the timed layer reads its group's only
    batch.sequences.push_back(seq);
  }
  step.meta.build(batch, c, groups, {kBlockSize, pool_blocks}, 0, 0, 0, prefill_min_rows);
  step.device = cuda::to_device(step.meta.host());
  step.view = step.meta.view(step.device.as<int32_t>());
}

int first_layer_of(const ModelConfig& c, AttentionKind kind) {
  int layer = 0;
  while (c.layer_types[layer] != kind) ++layer;
  return layer;
}

// Visible (query, key) pairs of a causal prompt of `length` tokens from position 0 under `window` (0: all).
double visible_pairs(int length, int window) {
  const double n = length, w = window > 0 ? std::min(window, length) : length;
  return w * (w + 1) / 2 + (n - w) * w;
}

std::vector<float> bf16_to_float(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t word = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &word, 4);
  }
  return out;
}

// ||a - b|| / ||b||, infinite when either holds a non-finite value.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// The prefill step (one prompt) on the layer `params` describes: version 2 with the built-in block count, then with
// the other one (one block a unit where the built-in choice runs units in turn, one a multiprocessor where it does
// not; launch_attention_prefill's `blocks`), then version 1, each timed; version 2's output compared with version
// 1's (written to out_v1).
void time_prefill(const cuda::AttentionParams& params, const cuda::StepView& step, const bench_cuda::Ceilings& ceilings,
                  int multiprocessors, int reps, DeviceBuffer& out_v1, std::vector<Row>& rows) {
  const int length = step.num_tokens;
  const std::string layer = params.window > 0 ? fmt::format("sliding {}", params.window) : "full";
  const double flops = 4.0 * params.heads * params.head_dim * visible_pairs(length, params.window);
  cuda::AttentionParams v1_params = params;
  v1_params.out = out_v1.get();
  const int other_blocks = params.window > 0 ? std::numeric_limits<int>::max() : multiprocessors;
  const std::string other = params.window > 0 ? "one block a unit" : "units in turn";
  struct Variant {
    std::string name;
    std::function<void()> run;
  };
  const std::vector<Variant> variants = {
      {"v2 wgmma", [&] { cuda::launch_attention_prefill(nullptr, params, step); }},
      {"v2 wgmma, " + other, [&] { cuda::launch_attention_prefill(nullptr, params, step, other_blocks); }},
      {"v1 mma.sync", [&] { bench_cuda::launch_attention_prefill_v1(nullptr, v1_params, step); }},
  };
  const size_t count = static_cast<size_t>(length) * params.heads * params.head_dim;
  for (const Variant& v : variants) {
    const bool v1 = v.name == "v1 mma.sync";
    const double us = bench_cuda::event_time_us(v.run, reps, 3);
    Row r{fmt::format("prefill {} {}", v.name, layer), kv_name(params.kv.dtype), 1, length, 0, us,
          flops / (us * 1e-6) / 1e12, 0};
    r.of_ceiling = r.rate * 1e12 / ceilings.bf16_flops_per_s;
    double vs_v1 = -1;
    if (v1) {
      MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
      vs_v1 = relative_difference(bf16_to_float(cuda::to_host<uint16_t>(params.out, count)),
                                  bf16_to_float(cuda::to_host<uint16_t>(out_v1.get(), count)));
      rows[rows.size() - 1].vs_v1 = vs_v1;  // the last version 2 row's output is what params.out holds
    }
    fmt::print("{} {} 1 x {}: {:.0f} us, {:.0f} TFLOP/s ({:.0f}% of bf16 matmul){}\n", r.kernel, r.kv, length, us,
               r.rate, 100 * r.of_ceiling, v1 ? fmt::format("; v2 against v1: {:.2e}", vs_v1) : "");
    rows.push_back(r);
  }
}

int run(int argc, char** argv) {
  CLI::App app{"decode and prefill attention alone on one gpt-oss-120b layer"};
  std::string json_path;
  int reps = 20;
  std::vector<int> batches = {1, 8, 64, 256, 1024}, contexts = {1024, 2048, 8192};
  int prefill_length = 8192;
  app.add_option("--json", json_path, "write the figures here");
  app.add_option("--reps", reps, "timed launches per figure")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--batches", batches)->delimiter(',')->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--contexts", contexts)->delimiter(',')->capture_default_str()->check(CLI::Range(1, 131072));
  app.add_option("--prefill", prefill_length, "prompt length of the prefill figure (0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 131072));
  CLI11_PARSE(app, argc, argv);

  cudaDeviceProp prop{};
  MOESERVE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const bench_cuda::Ceilings ceilings = bench_cuda::measure_ceilings();
  fmt::print("{}: {} SMs; measured copy {:.2f} TB/s (read + write), bf16 matmul {:.0f} TFLOP/s\n", prop.name,
             prop.multiProcessorCount, ceilings.copy_bytes_per_s / 1e12, ceilings.bf16_flops_per_s / 1e12);

  TinyModelOptions shape;
  shape.shape = "gpt-oss-120b";
  const ModelConfig c = tiny_model_config(shape);
  const KvGroups groups = kv_groups_of(c);
  const int layer = first_layer_of(c, AttentionKind::full);
  const int D = c.head_dim, H = c.num_heads, KVH = c.num_kv_heads;
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int max_context = std::max(*std::max_element(contexts.begin(), contexts.end()), prefill_length);
  const int64_t pool_blocks =
      std::max<int64_t>(static_cast<int64_t>(max_batch) * ((*std::max_element(contexts.begin(), contexts.end()) + 15) / 16),
                        (max_context + kBlockSize - 1) / kBlockSize);
  const size_t block_elements = 2 * static_cast<size_t>(KVH) * kBlockSize * D;  // one layer slot a block
  DeviceBuffer kv(pool_blocks * block_elements * 2), sinks(H * 4);
  const int max_tokens = std::max(max_batch, prefill_length);
  DeviceBuffer q(static_cast<size_t>(max_tokens) * H * D * 2), out(static_cast<size_t>(max_tokens) * H * D * 2),
      out_v1(static_cast<size_t>(prefill_length) * H * D * 2);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, q.get(), static_cast<int64_t>(max_tokens) * H * D, 5, 0.0f, 1.0f);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, sinks.get(), H, 6, 0.0f, 1.0f);
  fmt::print("pool: {} blocks of 16 tokens, {:.1f} GB of bf16 KV for one layer\n", pool_blocks, kv.bytes() / 1e9);

  std::vector<Row> rows;
  for (KvDtype dtype : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
    cuda::fill_kv_random(nullptr, dtype, kv.get(), pool_blocks * block_elements * cuda::kv_element_bytes(dtype), 11);
    const cuda::KvView view{kv.get(), kBlockSize, 1, KVH, D, dtype};
    const cuda::AttentionParams params{q.get(), out.get(), sinks.as<float>(), c.attention_scale(), H, KVH, D, 0, view,
                                       groups.group_of_layer[layer], 0, 1.0f, 1.0f};
    for (int context : contexts)
      for (int batch : batches) {
        Step step;
        build_step(step, c, std::vector<int>(batch, 1), context, pool_blocks, cuda::kNoPrefillTiles);
        const int units = step.meta.num_decode_groups() * KVH;
        const int splits = cuda::attention_decode_max_splits(dtype, c.heads_per_kv(), units, prop.multiProcessorCount);
        DeviceBuffer partial(std::max<size_t>(cuda::attention_decode_partial_floats(units, splits) * 4, 16)),
            counters(static_cast<size_t>(units) * 4);
        MOESERVE_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
        const cuda::DecodeScratch scratch{splits, partial.as<float>(), counters.as<int32_t>()};
        const double us = bench_cuda::event_time_us(
            [&] { cuda::launch_attention_decode(nullptr, params, step.view, scratch); }, reps, 3);
        const double bytes = static_cast<double>(batch) * context * KVH * 2 * D * cuda::kv_element_bytes(dtype);
        Row r{"decode", kv_name(dtype), batch, context, splits, us, bytes / (us * 1e-6) / 1e9, 0};
        r.of_ceiling = r.rate * 1e9 / ceilings.copy_bytes_per_s;
        fmt::print("decode {} batch {} context {}: {:.1f} us, {} splits, {:.0f} GB/s ({:.0f}% of copy)\n", r.kv, batch,
                   context, us, splits, r.rate, 100 * r.of_ceiling);
        rows.push_back(r);
      }
    if (prefill_length > 0) {
      Step step;
      build_step(step, c, {prefill_length}, prefill_length, pool_blocks, 1);
      for (const AttentionKind kind : {AttentionKind::full, AttentionKind::sliding}) {
        cuda::AttentionParams layer_params = params;
        layer_params.window = kind == AttentionKind::sliding ? c.sliding_window : 0;
        layer_params.group = groups.group_of_layer[first_layer_of(c, kind)];
        time_prefill(layer_params, step.view, ceilings, prop.multiProcessorCount, std::max(1, reps / 4), out_v1, rows);
      }
    }
  }
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());

  fmt::print("\n| kernel | KV | batch | context | splits | us | rate | of ceiling |\n|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {:.0f} {} | {:.0f}% |\n", r.kernel, r.kv, r.batch, r.context,
               r.splits, r.us, r.rate, r.kernel == "decode" ? "GB/s" : "TFLOP/s", 100 * r.of_ceiling);
  bool agree = true;
  for (const Row& r : rows)
    if (r.vs_v1 >= 0) {
      fmt::print("{} {}: ||v2 - v1|| / ||v1|| = {:.2e}\n", r.kernel, r.kv, r.vs_v1);
      agree = agree && r.vs_v1 <= kMaxVersionDifference;
    }
  if (!json_path.empty()) {
    nlohmann::json json = {{"gpu", prop.name},
                           {"copy_tb_per_s", ceilings.copy_bytes_per_s / 1e12},
                           {"bf16_tflop_per_s", ceilings.bf16_flops_per_s / 1e12},
                           {"rows", nlohmann::json::array()}};
    for (const Row& r : rows)
      json["rows"].push_back({{"kernel", r.kernel}, {"kv", r.kv}, {"batch", r.batch}, {"context", r.context},
                              {"splits", r.splits}, {"us", r.us}, {"rate", r.rate},
                              {"unit", r.kernel == "decode" ? "GB/s" : "TFLOP/s"}, {"of_ceiling", r.of_ceiling},
                              {"vs_v1", r.vs_v1 >= 0 ? nlohmann::json(r.vs_v1) : nlohmann::json(nullptr)}});
    std::ofstream file(json_path);
    MOESERVE_CHECK(file.good(), "cannot write {}", json_path);
    file << json.dump(2) << "\n";
  }
  if (!agree) {
    fmt::print(stderr, "attention_bench: prefill versions 1 and 2 differ by more than {} (or wrote non-finite values)\n",
               kMaxVersionDifference);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace moeserve

int main(int argc, char** argv) { return moeserve::bench_cuda::bench_main("attention_bench", moeserve::run, argc, argv); }
