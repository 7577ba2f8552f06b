// GPU sampling (runner/cuda/sampling.cu) against the host path it replaced in the CUDA runner: the whole logits
// rows copied back to pageable memory, then sample_token row by row on one CPU thread. Rows of 201,088 logits
// (GPT-OSS's vocabulary) drawn uniform with standard deviation 3, temperature 1, with and without top-k / top-p /
// min-p. The kernel is timed with CUDA events over repeated launches and set beside its floor, one read of the
// logits (rows x V x 4 bytes) at the device-to-device copy bandwidth measured in the same run; the host path is
// timed on the wall clock, once per configuration.
// Then small batches (issue 15), greedy rows (argmax) and temperature-only rows (T = 1, MLPerf's gpt-oss
// sampling): each row on one block (the old path) beside a row over a cluster of 2, 4, 8 and 16 blocks, and the
// cluster size sampling_cluster_blocks picks, in microseconds a launch and in GB/s against one read of the rows
// (rows x 804 KB; the temperature path reads its range twice, the crossing block three times). The same logits
// every launch: rows of 804 KB stay in L2, as the unembedding leaves them in the runner.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/sampling.h"
#include "sampling/sampler.h"

namespace moeserve {
namespace {

using Clock = std::chrono::steady_clock;

double copy_bandwidth() {  // bytes read + written per second
  const size_t bytes = size_t{2} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  MOESERVE_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  MOESERVE_CUDA_CHECK(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t start, stop;
  MOESERVE_CUDA_CHECK(cudaEventCreate(&start));
  MOESERVE_CUDA_CHECK(cudaEventCreate(&stop));
  MOESERVE_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < 10; ++i) MOESERVE_CUDA_CHECK(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
  MOESERVE_CUDA_CHECK(cudaEventRecord(stop));
  MOESERVE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return 2.0 * bytes * 10 / (ms * 1e-3);
}

struct Config {
  std::string name;
  SamplingParams params;
};

std::vector<Config> configs() {
  SamplingParams t;
  t.temperature = 1.0f;
  SamplingParams p = t, k = t, all = t;
  p.top_p = 0.9f;
  k.top_k = 50;
  all.top_k = 50, all.top_p = 0.9f, all.min_p = 0.05f;
  return {{"T=1", t}, {"T=1 top_p=0.9", p}, {"T=1 top_k=50", k}, {"T=1 top_k=50 top_p=0.9 min_p=0.05", all}};
}

constexpr int V = 201088;

// The argmax or the sampling launch over `rows` rows with `blocks` blocks a row (0: the rule's).
double small_batch_us(int rows, bool greedy, int blocks, const cuda::DeviceBuffer& logits, cuda::DeviceBuffer& tokens) {
  std::vector<cuda::SampleRow> host_rows;
  for (int r = 0; r < rows; ++r) {
    SamplingParams p;
    p.temperature = 1.0f, p.seed = 1000 + r;
    host_rows.push_back({r, 42, p});
  }
  const cuda::DeviceBuffer sample_rows = cuda::to_device(host_rows);
  const int chosen = blocks > 0 ? blocks : cuda::sampling_cluster_blocks(rows);
  auto launch = [&] {
    if (greedy)
      cuda::launch_argmax_split(nullptr, logits.as<float>(), rows, V, tokens.as<int32_t>(), chosen);
    else
      cuda::launch_sample_split(nullptr, logits.as<float>(), V, sample_rows.as<cuda::SampleRow>(), rows,
                                tokens.as<int32_t>(), chosen);
  };
  return bench_cuda::event_time_us(launch, 200, 5);
}

void small_batches() {
  int largest = 1;
  std::printf("\nclusters resident at once:");
  for (int blocks = 2; blocks <= 16; blocks *= 2) {
    std::printf(" %d of %d blocks%s", cuda::sampling_resident_clusters(blocks), blocks, blocks < 16 ? "," : "\n");
    if (cuda::sampling_resident_clusters(blocks) > 0) largest = blocks;
  }
  std::printf("small batches, V %d: microseconds a launch (GB/s against rows x %d KB read once)\n", V, V * 4 / 1000);
  std::printf("%5s  %-8s", "rows", "rows of");
  for (int blocks = 1; blocks <= largest; blocks *= 2) std::printf(" %9s%-2d", "blocks=", blocks);
  std::printf(" %6s %10s %10s %9s %8s\n", "rule", "rule_us", "rule_GB/s", "1blk_GB/s", "speedup");
  cuda::DeviceBuffer logits(size_t{16} * V * 4), tokens(16 * 4);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, logits.get(), int64_t{16} * V, 7, 0.0f, 3.0f);
  for (bool greedy : {true, false})
    for (int rows : {1, 2, 4, 8, 16}) {
      const double bytes = static_cast<double>(rows) * V * 4;
      std::printf("%5d  %-8s", rows, greedy ? "greedy" : "T=1");
      double one_block_us = 0;
      for (int blocks = 1; blocks <= largest; blocks *= 2) {
        const double us = small_batch_us(rows, greedy, blocks, logits, tokens);
        if (blocks == 1) one_block_us = us;
        std::printf(" %11.1f", us);
      }
      const double rule_us = small_batch_us(rows, greedy, 0, logits, tokens);
      std::printf(" %6d %10.1f %10.0f %9.0f %7.1fx\n", cuda::sampling_cluster_blocks(rows), rule_us,
                  bytes / rule_us * 1e-3, bytes / one_block_us * 1e-3, one_block_us / rule_us);
    }
}

int run() {
  const double bandwidth = copy_bandwidth();
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", bandwidth * 1e-9);
  std::printf("%5s  %-36s %10s %12s %10s %12s %9s\n", "rows", "filters", "gpu_us", "read_floor_us", "floor_%",
              "host_path_us", "speedup");
  for (int rows : {1, 64, 256}) {
    const size_t n = static_cast<size_t>(rows) * V;
    cuda::DeviceBuffer logits(n * 4), sample_rows(rows * sizeof(cuda::SampleRow)), tokens(rows * 4);
    cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, logits.get(), static_cast<int64_t>(n), 7, 0.0f, 3.0f);
    for (const Config& config : configs()) {
      std::vector<cuda::SampleRow> host_rows;
      for (int r = 0; r < rows; ++r) {
        SamplingParams p = config.params;
        p.seed = 1000 + r;
        host_rows.push_back({r, 42, p});
      }
      MOESERVE_CUDA_CHECK(cudaMemcpy(sample_rows.get(), host_rows.data(), rows * sizeof(cuda::SampleRow),
                                     cudaMemcpyHostToDevice));
      auto launch = [&] {
        cuda::launch_sample(nullptr, logits.as<float>(), V, sample_rows.as<cuda::SampleRow>(), rows,
                            tokens.as<int32_t>());
      };
      const double gpu_us = bench_cuda::event_time_us(launch, 50);
      const double floor_us = n * 4.0 / (bandwidth / 2) * 1e6;  // one read at the copy's one-way rate

      // The old path: logits to the host, then the CPU sampler per row (the draws must agree).
      const auto gpu_tokens = cuda::to_host<int32_t>(tokens.get(), rows);
      const auto host_start = Clock::now();
      std::vector<float> host(n);
      MOESERVE_CUDA_CHECK(cudaMemcpy(host.data(), logits.get(), n * 4, cudaMemcpyDeviceToHost));
      int differ = 0;
      for (int r = 0; r < rows; ++r)
        differ += sample_token({host.data() + static_cast<size_t>(r) * V, static_cast<size_t>(V)}, host_rows[r].params, 42) !=
                  gpu_tokens[r];
      const double host_us = std::chrono::duration<double, std::micro>(Clock::now() - host_start).count();
      std::printf("%5d  %-36s %10.1f %12.1f %9.0f%% %12.0f %8.0fx%s\n", rows, config.name.c_str(), gpu_us, floor_us,
                  100.0 * floor_us / gpu_us, host_us, host_us / gpu_us,
                  differ ? (" (" + std::to_string(differ) + " draws differ)").c_str() : "");
    }
  }
  small_batches();
  return 0;
}

}  // namespace
}  // namespace moeserve

int main() { return moeserve::run(); }
