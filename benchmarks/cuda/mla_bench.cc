// MLA decode attention alone (mla_decode.cu / mla_decode_mma.cu, absorbed form) on one layer of DeepSeek-V3's shape (128 heads, latent
// 512, rope 64; cache rows of 576 values in blocks of 16 scattered over the pool), one token per sequence at batch
// 1, 8, 32, 128 and contexts 1k, 2k, 8k, bf16 and fp8 e4m3 cache (random values filled on the device), against
// ceilings measured in the same run:
//   GB/s = the latent rows read (batch x context x 576 elements, each once per query token) over the kernel's time
//     (merge included), against the device-to-device copy bandwidth; the partial outputs the splits write and the
//     merge reads (tokens x 128 heads x splits x 514 floats, twice) are printed beside it;
//   TFLOP/s = 2 x 128 heads x context x (576 + 512) per token (scores and outputs) over the time, against cuBLASLt's
//     bf16 matrix rate (version 1 runs on CUDA cores in fp32, so its compute ceiling is ~1/12 of that; version 2
//     on mma.sync).
// Times are CUDA events around `--reps` launches after 3 warm-ups; the split size is the runner's choice
// (mla_decode_split_keys). --version picks the kernels timed (mla_layout.h's MlaDecodeVersion), one row each.
//   mla_bench [--reps N] [--batches 1,8,...] [--contexts 1024,...] [--version v1,v2]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "bench_common.h"
#include "model/deepseek_v3/make_tiny.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;

constexpr int kBlockSize = 16;

// Decode rows: sequence s's token at position context - 1, its blocks a shuffled share of the pool. Arrays in
// StepView's order, one KV group.
struct DecodeStep {
  DeviceBuffer device;
  cuda::StepView view;
  DecodeStep(int batch, int context) {
    const int blocks_each = (context + kBlockSize - 1) / kBlockSize;
    std::vector<int32_t> pool(static_cast<size_t>(batch) * blocks_each);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(7));
    std::vector<int32_t> data;
    for (int s = 0; s < batch; ++s) data.push_back(context - 1);  // positions
    for (int s = 0; s < batch; ++s) data.push_back(s);            // token_seq
    for (int s = 0; s < batch; ++s) data.push_back(s);            // seq_q_start
    data.insert(data.end(), batch, 1);                            // seq_q_len
    data.insert(data.end(), batch, context);                      // seq_context
    data.push_back(blocks_each);                                  // table_stride
    data.insert(data.end(), pool.begin(), pool.end());            // block tables
    device = cuda::to_device(data);
    const int32_t* d = device.as<int32_t>();
    view.num_tokens = view.num_seqs = batch;
    view.num_groups = 1;
    view.positions = d;
    view.token_seq = d + batch;
    view.seq_q_start = d + 2 * batch;
    view.seq_q_len = d + 3 * batch;
    view.seq_context = d + 4 * batch;
    view.table_stride = d + 5 * batch;
    view.block_tables = d + 5 * batch + 1;
  }
};

int run(int argc, char** argv) {
  CLI::App app{"MLA decode attention on one DeepSeek-V3 layer"};
  int reps = 20;
  std::vector<int> batches = {1, 8, 32, 128}, contexts = {1024, 2048, 8192};
  std::vector<std::string> version_names = {"v1", "v2"};
  app.add_option("--reps", reps, "timed launches per figure")->capture_default_str()->check(CLI::Range(1, 10000));
  app.add_option("--batches", batches)->delimiter(',')->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--contexts", contexts)->delimiter(',')->capture_default_str()->check(CLI::Range(1, 131072));
  app.add_option("--version", version_names, "decode kernels to time")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"v1", "v2"}));
  CLI11_PARSE(app, argc, argv);
  std::vector<cuda::MlaDecodeVersion> versions(version_names.size());
  for (size_t i = 0; i < versions.size(); ++i) cuda::mla_decode_version_named(version_names[i], versions[i]);

  const deepseek_v3::Config c = deepseek_v3::tiny_config({.shape = "deepseek-r1"});
  const int H = c.num_heads, L = c.kv_lora_rank, W = c.latent_width();
  const cuda::MlaCacheShape shape{L, c.qk_rope_head_dim, kBlockSize, 1};
  const bench_cuda::Ceilings ceilings = bench_cuda::measure_ceilings();
  const int sms = cuda::device_multiprocessors();
  fmt::print("{:>3} {:>5} {:>6} {:>7} {:>5} {:>10} {:>9} {:>7} {:>10} {:>9} {:>7}\n", "ver", "kv", "batch", "context",
             "keys", "us", "GB/s", "of copy", "partial MB", "TFLOP/s", "of bf16");
  for (const KvDtype dtype : {KvDtype::bf16, KvDtype::fp8_e4m3})
    for (const int batch : batches)
      for (const int context : contexts) {
        DecodeStep step(batch, context);
        const int64_t blocks = static_cast<int64_t>(batch) * ((context + kBlockSize - 1) / kBlockSize);
        const size_t cache_bytes = blocks * cuda::mla_block_elements(shape) * cuda::kv_element_bytes(dtype);
        DeviceBuffer cache(cache_bytes), q_latent(static_cast<size_t>(batch) * H * L * 4),
            q_rope(static_cast<size_t>(batch) * H * c.qk_rope_head_dim * 4), out(static_cast<size_t>(batch) * H * L * 4);
        cuda::fill_kv_random(nullptr, dtype, cache.get(), cache_bytes, 11);
        cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, q_latent.get(), batch * H * L, 12, 0.0f, 1.0f);
        cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, q_rope.get(), batch * H * c.qk_rope_head_dim, 13, 0.0f,
                                  1.0f);
        const int keys = cuda::mla_decode_split_keys(batch, context, sms);
        const int splits = cuda::mla_decode_splits(context - 1, keys);
        DeviceBuffer partial(cuda::mla_decode_partial_floats(batch, H, L, splits) * 4);
        const cuda::MlaDecodeParams params{q_latent.as<float>(), q_rope.as<float>(), out.as<float>(),
                                           c.softmax_scale(), H, cuda::MlaCacheView{cache.get(), shape, dtype}, 0, 0,
                                           dtype == KvDtype::fp8_e4m3 ? 0.05f : 1.0f};
        const cuda::MlaDecodeScratch scratch{keys, splits, partial.as<float>()};
        for (const cuda::MlaDecodeVersion version : versions) {
          const double us = bench_cuda::event_time_us(
              [&] { cuda::launch_mla_decode(nullptr, params, step.view, scratch, version); }, reps, 3);
          const double latent_bytes = static_cast<double>(batch) * context * W * cuda::kv_element_bytes(dtype);
          const double flops = 2.0 * batch * H * context * (W + L);
          const double gbs = latent_bytes / (us * 1e-6) / 1e9;
          const double tflops = flops / (us * 1e-6) / 1e12;
          fmt::print("{:>3} {:>5} {:>6} {:>7} {:>5} {:>10.2f} {:>9.0f} {:>6.1f}% {:>10.1f} {:>9.2f} {:>6.1f}%\n",
                     cuda::mla_decode_version_name(version), dtype == KvDtype::bf16 ? "bf16" : "fp8", batch, context,
                     keys, us, gbs, 100.0 * gbs * 1e9 / ceilings.copy_bytes_per_s, 2.0 * partial.bytes() / 1e6, tflops,
                     100.0 * tflops * 1e12 / ceilings.bf16_flops_per_s);
        }
      }
  return 0;
}

}  // namespace
}  // namespace moeserve

int main(int argc, char** argv) { return moeserve::bench_cuda::bench_main("mla_bench", moeserve::run, argc, argv); }
