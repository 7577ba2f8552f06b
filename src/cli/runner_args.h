// The options that choose and open a model runner, shared by the subcommands that run a model:
// the model directory (positional, or --model DIR) or --synthetic SHAPE, --device cpu|cuda, --dtype and
// --kv-cache-dtype (CUDA; vLLM's names), --threads (CPU), --tensor-parallel-size and --enable-expert-parallel
// (vLLM's names; the CPU runner so far).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/deepseek_v3/checkpoint.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/runner.h"

namespace moeserve::cli {

struct RunnerArgs {
  std::string model;
  std::string synthetic;  // gpt-oss-20b, gpt-oss-120b or deepseek-r1: random weights made on the GPU
  int synthetic_layers = 0;  // deepseek-r1: the synthetic model's depth (required; 13 fits one H200)
  std::string device = "cpu";
  std::string precision = "bf16";
  std::string kv_cache_dtype = "auto";  // vLLM's flag: auto, bf16 (bfloat16), fp8_e4m3 (fp8)
  std::string activation_dtype = "auto";  // CUDA expert-projection inputs: auto / bf16, or fp8 (e4m3, per-row scale)
  size_t threads = 0;
  std::string synthetic_router = "uniform";  // --synthetic only: uniform or zipf[:S]
  std::string moe_path_table;                // --device cuda: the MoE kernels by rows per expert (benchmarking)
  int tensor_parallel_size = 1;              // ranks the model is split over (runner/parallel/rank_shard.h)
  bool enable_expert_parallel = false;       // whole experts a rank instead of a slice of each
};

void add_runner_options(CLI::App* command, RunnerArgs& args);
// A --model that exists must be a directory: an Error saying so (a user who names config.json or a shard).
void check_model_directory(const std::string& model);

// --model opens the checkpoint of its family (config.json's model_type): GPT-OSS and the DeepSeek-V3 family
// (DeepSeek-V3, DeepSeek-R1) on the CPU or CUDA runner.
struct OpenedRunner {
  std::shared_ptr<const Checkpoint> checkpoint;  // GPT-OSS; null for a synthetic model or another family
  std::shared_ptr<const deepseek_v3::Checkpoint> deepseek;  // the DeepSeek-V3 family
  std::unique_ptr<ModelRunner> runner;
  size_t threads = 0;  // --threads: CPU threads for the CPU runner and CPU-side helpers (a draft head); 0: all
};
OpenedRunner open_runner(const RunnerArgs& args);

}  // namespace moeserve::cli
