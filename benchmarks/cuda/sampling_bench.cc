// GPU sampling (runner/cuda/sampling.cu) against the host path it replaced in the CUDA runner: the whole logits
// rows copied back to pageable memory, then sample_token row by row on one CPU thread. Rows of 201,088 logits
// (GPT-OSS's vocabulary) drawn uniform with standard deviation 3, temperature 1, with and without top-k / top-p /
// min-p. The kernel is timed with CUDA events over repeated launches and set beside its floor, one read of the
// logits (rows x V x 4 bytes) at the device-to-device copy bandwidth measured in the same run; the host path is
// timed on the wall clock, once per configuration.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
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

int run() {
  constexpr int V = 201088;
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
  return 0;
}

}  // namespace
}  // namespace moeserve

int main() { return moeserve::run(); }
