// Full DeepSeek-R1 on 8 GPUs of one host projected from deepseek_layer_bench's per-layer figures (r1_projection.h
// says how, term by term), beside TensorRT-LLM's figures on 8 x H200. Runs anywhere (no GPU):
//   deepseek_projection --json layers.json [--acceptance 0.7] [--bus-gbps 287] [--collective-latency-us 10] ...
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "r1_projection.h"
#include "util/files.h"

namespace moeserve::deepseek_bench {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"DeepSeek-R1 on 8 GPUs projected from one GPU's per-layer figures"};
  std::string json_path;
  ProjectionSettings s;
  double bus_gbps = s.bus_bytes_per_s / 1e9, latency_us = s.collective_latency_s * 1e6;
  app.add_option("--json", json_path, "deepseek_layer_bench --json output")->required()->check(CLI::ExistingFile);
  app.add_option("--gpus", s.gpus)->check(CLI::Range(2, 64))->capture_default_str();
  app.add_option("--bus-gbps", bus_gbps, "NCCL bus bandwidth, GB/s")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--collective-latency-us", latency_us, "fixed cost of each collective (assumed)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  app.add_option("--acceptance", s.acceptance, "MTP per-position acceptance")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--mtp-steps", s.mtp_steps)->check(CLI::Range(1, 7))->capture_default_str();
  app.add_option("--context", s.context, "batch-1 context (the bench's --context)")
      ->check(CLI::Range(int64_t{1}, int64_t{131072}))
      ->capture_default_str();
  app.add_option("--concurrency", s.concurrency, "Offline sequences in flight (a decode batch the bench measured)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  app.add_option("--input-tokens", s.input_tokens)
      ->check(CLI::Range(int64_t{1}, int64_t{131072}))
      ->capture_default_str();
  app.add_option("--output-tokens", s.output_tokens)
      ->check(CLI::Range(int64_t{2}, int64_t{131072}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  s.bus_bytes_per_s = bus_gbps * 1e9;
  s.collective_latency_s = latency_us * 1e-6;

  const nlohmann::json json = read_json_file(json_path);
  fmt::print("From {} ({}):\n\n{}", json_path, json.value("gpu", "?"),
             format_projections(measurements_from_json(json, json_path), s));
  return 0;
}

}  // namespace
}  // namespace moeserve::deepseek_bench

int main(int argc, char** argv) {
  try {
    return moeserve::deepseek_bench::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "deepseek_projection: error: {}\n", e.what());
    return 1;
  }
}
