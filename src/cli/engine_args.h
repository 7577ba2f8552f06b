// The engine options shared by the subcommands that serve requests (serve, bench, eval, generate): KV budget,
// block size, batch limits, scheduling policy and its targets, prefix caching, speculative decoding.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "cli/runner_args.h"
#include "engine/engine_core.h"

namespace moeserve::cli {

struct EngineArgs {
  EngineConfig config;
  // Unset: chosen by the runner (engine_config), as vLLM chooses its defaults by device.
  std::optional<int> max_num_seqs, max_batched_tokens;
  std::string kv_cache_size;  // "4GiB", "512MiB", bytes
  // vLLM's --gpu-memory-utilization: the share of the GPU's total memory the engine may take, weights and all;
  // the KV cache gets what is left of it. Unset: 0.9 on a GPU runner.
  std::optional<double> gpu_memory_utilization;
  std::string scheduler = "fcfs";
  // The slo scheduler's p99 targets, seconds. Unset: SchedulerConfig's (MLPerf gpt-oss-120b Server's 3 s / 80 ms);
  // `moeserve bench` of a Server or Interactive run sets the unset ones to that run's own TTFT / TPOT bounds.
  std::optional<double> ttft_target_seconds, tpot_target_seconds;
  bool prefix_caching = true;
  std::string speculative_config;  // JSON (engine/speculative/speculative_config.h)
};

void add_engine_options(CLI::App* command, EngineArgs& args);
// The engine config after parsing; the KV budget defaults to what --gpu-memory-utilization 0.9 leaves on a GPU
// runner and to 1 GiB of host memory on the CPU runner, the batch limits to kGpuMaxNumSeqs / kGpuMaxBatchedTokens
// on a GPU runner and to SchedulerConfig's on the CPU runner. With --speculative-config, the drafter is built too:
// an EAGLE-3 head (on the GPU beside the CUDA runner, else on the CPU; its KV pool holding as many tokens as the
// target's; "model": "synthetic" gives the GPU a random head of gpt-oss-120b's shape) or the test drafter named by
// the method.
// A GPU runner's batch limits when none are given: what measured fastest at the MLPerf and TensorRT-LLM shapes on
// an H200 (docs/PERF.md, "Throughput"); vLLM's defaults for H100/H200-class GPUs are 1,024 sequences and 8,192
// batched tokens for its API server.
inline constexpr int kGpuMaxNumSeqs = 1024;
inline constexpr int kGpuMaxBatchedTokens = 8192;
EngineConfig engine_config(const EngineArgs& args, const OpenedRunner& opened);
// "4GiB", "512MiB", "1.5G", "1000000" -> bytes; an Error naming the text otherwise.
int64_t parse_byte_size(const std::string& text);

}  // namespace moeserve::cli
