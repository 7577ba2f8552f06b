// What the CUDA benchmarks share: the device's ceilings measured in the same run, and the bytes and FLOPs a step of
// a GPT-OSS model must move or compute (its floors).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "runner/cuda/cuda_check.h"

namespace moeserve::bench_cuda {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start);

// Mean microseconds of `reps` calls of launch() on the default stream (CUDA events), after `warmups` calls.
template <typename F>
double event_time_us(F&& launch, int reps, int warmups = 1) {
  for (int i = 0; i < warmups; ++i) launch();
  cudaEvent_t start, stop;
  MOESERVE_CUDA_CHECK(cudaEventCreate(&start));
  MOESERVE_CUDA_CHECK(cudaEventCreate(&stop));
  MOESERVE_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < reps; ++i) launch();
  MOESERVE_CUDA_CHECK(cudaEventRecord(stop));
  MOESERVE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / reps;
}

struct Ceilings {
  double copy_bytes_per_s = 0;  // device-to-device copy of 4 GiB, bytes read + written
  double bf16_flops_per_s = 0;  // cuBLASLt bf16 8192^3 on random data
};
Ceilings measure_ceilings();

// Bytes a step must read: every dense weight, each expert the step's tokens touch once (uniform routing:
// E (1 - (1 - k/E)^tokens) per layer), each of the batch's sequences' visible keys and values once, and the
// unembedding.
double step_bytes(const ModelConfig& c, int batch, int tokens, int context);
inline double decode_bytes(const ModelConfig& c, int batch, int context) { return step_bytes(c, batch, batch, context); }
// Bytes of one EAGLE-3 draft step (a head of the target's width as exported for gpt-oss, bf16), read once per step.
double eagle3_draft_step_bytes(const ModelConfig& c);
// Writes json to path (nothing when path is empty); fails naming the path.
void write_json(const std::string& path, const nlohmann::json& json);
// A benchmark's main: runs `run` and turns an exception into "NAME: error: ..." and exit code 1.
int bench_main(const char* name, int (*run)(int, char**), int argc, char** argv);

// FLOPs of a prefill step of `prompts` prompts of `length` tokens with one logits row each.
double prefill_flops(const ModelConfig& c, int prompts, int length);

}  // namespace moeserve::bench_cuda
