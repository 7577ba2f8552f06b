#include "bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>

#include "runner/cuda/blas.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
#include "util/error.h"

namespace moeserve::bench_cuda {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

Ceilings measure_ceilings() {
  Ceilings c;
  const size_t bytes = size_t{4} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::launch_fill_bytes(nullptr, a.as<uint8_t>(), bytes, 1);
  const double copy_us =
      event_time_us([&] { MOESERVE_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); }, 10);
  c.copy_bytes_per_s = 2.0 * bytes / (copy_us * 1e-6);
  const int64_t n = 8192;
  cuda::DeviceBuffer x(n * n * 2), w(n * n * 2), y(n * n * 4);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, x.get(), n * n, 2, 0.0f, 1.0f);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, w.get(), n * n, 3, 0.0f, 1.0f);
  cuda::Blas blas;
  const double mm_us = event_time_us(
      [&] { blas.linear(nullptr, cuda::Precision::bf16, x.get(), n, w.get(), n, n, nullptr, y.as<float>()); }, 10);
  c.bf16_flops_per_s = 2.0 * n * n * n / (mm_us * 1e-6);
  return c;
}

double step_bytes(const ModelConfig& c, int batch, int tokens, int context) {
  const double H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts, I = c.intermediate_size,
               k = c.experts_per_token;
  const double dense = ((Q + 2 * KV) * H + H * Q + E * H) * 2;
  const double expert = (2 * I * H + H * I) * 17.0 / 32.0 + (2 * I + H) * 4;  // MXFP4 blocks + scales, fp32 bias
  const double touched = E * (1.0 - std::pow(1.0 - k / E, tokens));
  double total = c.vocab_size * H * 2;
  for (AttentionKind kind : c.layer_types) {
    const double keys = kind == AttentionKind::sliding ? std::min(context, c.sliding_window) : context;
    total += dense + touched * expert + batch * keys * KV * 2 * 2;
  }
  return total;
}
// The head: fc from three features, attention from 2H inputs, a SiLU MLP of 6H, a 32,000-token lm_head.
double eagle3_draft_step_bytes(const ModelConfig& c) {
  const double H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = 6 * H, V = 32000;
  return (3 * H * H + 2 * H * (Q + 2 * KV) + Q * H + 3 * H * I + V * H) * 2;
}

double prefill_flops(const ModelConfig& c, int prompts, int length) {
  const double H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts, I = c.intermediate_size,
               k = c.experts_per_token, T = static_cast<double>(prompts) * length;
  double total = prompts * 2.0 * c.vocab_size * H;
  for (AttentionKind kind : c.layer_types) {
    total += T * 2 * ((Q + 2 * KV) * H + H * Q + E * H + k * 3 * I * H);
    // q.k and p.v over the keys each query sees.
    double keys = 0;
    for (int p = 0; p < length; ++p) keys += kind == AttentionKind::sliding ? std::min(p + 1, c.sliding_window) : p + 1;
    total += prompts * keys * 4.0 * c.num_heads * c.head_dim;
  }
  return total;
}

void write_json(const std::string& path, const nlohmann::json& json) {
  if (path.empty()) return;
  std::FILE* f = std::fopen(path.c_str(), "w");
  MOESERVE_CHECK(f != nullptr, "cannot write {}", path);
  std::fputs(json.dump(2).c_str(), f);
  std::fclose(f);
}

int bench_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    return 1;
  }
}

}  // namespace moeserve::bench_cuda
