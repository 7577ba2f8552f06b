#include "cli/runner_args.h"

#include <filesystem>

#include "cli/cli_flags.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "model/gpt_oss/make_tiny.h"
#include "runner/cpu/tensor_parallel_runner.h"
#include "runner/parallel/rank_shard.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/moe_plan.h"
#include "util/error.h"

namespace moeserve::cli {

namespace {

// vLLM's --dtype names for the CUDA runner's activations and KV cache: auto is bf16, GPT-OSS's own type.
std::string precision_of_dtype(const std::string& dtype) {
  if (dtype == "float32" || dtype == "float" || dtype == "f32") return "f32";
  return "bf16";
}

}  // namespace

void add_runner_options(CLI::App* command, RunnerArgs& args) {
  auto* model =
      command->add_option("--model", args.model, "model directory (or give it first, as in 'vllm serve DIR')");
  command->add_option("model", args.model, "model directory: config.json, the *.safetensors files, tokenizer.json")
      ->excludes(model);
  command->add_option("--synthetic", args.synthetic, "random weights of a real shape, made on the GPU (--device cuda)")
      ->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b", "deepseek-r1"}));
  command->add_option("--synthetic-layers", args.synthetic_layers,
                      "--synthetic deepseek-r1: layers of the random model, the first three dense as in R1 (13 fits "
                      "one H200 with room for KV)")
      ->check(CLI::Range(1, 61));
  command->add_option("--device", args.device, "runner")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  command
      ->add_option_function<std::string>(
          "--dtype", [&args](const std::string& dtype) { args.precision = precision_of_dtype(dtype); },
          "CUDA activations and KV cache: auto (bfloat16), bfloat16, or float32 (matches the CPU runner); the CPU "
          "runner computes in float32 whatever this says")
      ->check(CLI::IsMember({"auto", "bfloat16", "bf16", "float32", "float", "f32"}));
  add_deprecated_option<std::string>(command, "--precision", "--dtype (bfloat16 or float32)",
                                     [&args](const std::string& precision) { args.precision = precision; })
      ->check(CLI::IsMember({"bf16", "f32"}));
  command->add_option("--kv-cache-dtype", args.kv_cache_dtype,
                      "CUDA KV cache: auto (the --dtype's type), bf16, or fp8_e4m3 (fp8; half the bytes, per-layer "
                      "scales from the checkpoint or 1.0)")
      ->check(CLI::IsMember({"auto", "bf16", "bfloat16", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  command->add_option("--activation-dtype", args.activation_dtype,
                      "CUDA expert projections' inputs: auto (bf16), bf16, or fp8 (e4m3 with a dynamic scale per "
                      "token row, e4m3 tensor cores, on the decode-regime paths; MXFP4 weights exact; off by default)")
      ->check(CLI::IsMember({"auto", "bf16", "bfloat16", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  command->add_option("--threads", args.threads, "CPU threads (0: all)")->capture_default_str();
  command->add_option("--synthetic-router", args.synthetic_router,
                      "--synthetic expert popularity: uniform, or zipf[:S] (router bias S ln(1/(rank+1)); S = 1)")
      ->capture_default_str();
  command->add_option("--moe-path-table", args.moe_path_table,
                      "CUDA MoE kernels by mean rows per expert, PATH:MAX,...,PATH (e.g. decode-x1:3.9,decode-mma-n16:12,"
                      "prefill-wgmma-split); default: the choice measured on an H200 and an H100. For benchmarking kernels end to "
                      "end");
  command
      ->add_option("--tensor-parallel-size,--tp-size", args.tensor_parallel_size,
                   "ranks to split the model over: attention heads, expert intermediate columns and the vocabulary "
                   "(CUDA: GPUs 0 .. N-1 through NCCL; CPU: rank threads sharing --threads)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  command->add_flag("--enable-expert-parallel,--enable-ep", args.enable_expert_parallel,
                    "place whole experts on the --tensor-parallel-size ranks instead of splitting every expert");
}

void check_model_directory(const std::string& model) {
  MOESERVE_CHECK(!std::filesystem::exists(model) || std::filesystem::is_directory(model),
                 "--model {} is a file, not a directory: give the model directory (the one holding config.json and "
                 "the *.safetensors files)",
                 model);
}

OpenedRunner open_runner(const RunnerArgs& args) {
  MOESERVE_CHECK(args.model.empty() != args.synthetic.empty(), "give exactly one of --model and --synthetic");
  CudaRunnerOptions cuda;
  cuda.precision = args.precision;
  cuda.synthetic_router = args.synthetic_router;
  parse_synthetic_router(cuda.synthetic_router);
  MOESERVE_CHECK(args.synthetic_router == "uniform" || !args.synthetic.empty(), "--synthetic-router needs --synthetic");
  cuda.kv_cache_dtype = args.kv_cache_dtype;
  cuda.activation_dtype = args.activation_dtype;
  MOESERVE_CHECK(args.device == "cuda" || args.activation_dtype == "auto",
                 "--activation-dtype {} needs --device cuda: the CPU runner computes in float32 (use auto)",
                 args.activation_dtype);
  cuda.moe_path_table = args.moe_path_table;
  MOESERVE_CHECK(args.moe_path_table.empty() || args.device == "cuda", "--moe-path-table needs --device cuda");
  if (!args.moe_path_table.empty()) cuda::parse_moe_path_table(args.moe_path_table);
  MOESERVE_CHECK(args.device == "cuda" || args.kv_cache_dtype == "auto",
                 "--kv-cache-dtype {} needs --device cuda: the CPU runner keeps an f32 KV cache (use auto)",
                 args.kv_cache_dtype);
  const ParallelConfig parallel{args.tensor_parallel_size, args.enable_expert_parallel};
  check_parallel_size(parallel);  // before any model or device is opened
  cuda.tensor_parallel_size = parallel.tensor_parallel_size;
  cuda.expert_parallel = parallel.expert_parallel;
  OpenedRunner opened;
  opened.threads = args.threads;
  const bool deepseek_synthetic = args.synthetic == "deepseek-r1";
  MOESERVE_CHECK(deepseek_synthetic || args.synthetic_layers == 0, "--synthetic-layers needs --synthetic deepseek-r1");
  if (deepseek_synthetic) {
    MOESERVE_CHECK(args.device == "cuda", "--synthetic needs --device cuda");
    opened.runner = make_synthetic_deepseek_cuda_runner(args.synthetic, args.synthetic_layers, 0, cuda);
    return opened;
  }
  if (!args.synthetic.empty()) {
    MOESERVE_CHECK(args.device == "cuda", "--synthetic needs --device cuda");
    TinyModelOptions shape;
    shape.shape = args.synthetic;
    check_parallel_config(tiny_model_config(shape), parallel);  // before any device is opened
    opened.runner = make_synthetic_cuda_runner(args.synthetic, 0, cuda);
    return opened;
  }
  check_model_directory(args.model);
  if (model_family_of(args.model) == ModelFamily::deepseek_v3) {
    opened.deepseek = std::shared_ptr<const deepseek_v3::Checkpoint>(deepseek_v3::Checkpoint::open(args.model));
    opened.runner = args.device == "cuda" ? make_deepseek_cuda_runner(opened.deepseek, cuda)
                                          : make_deepseek_cpu_runner(opened.deepseek, parallel, args.threads);
    return opened;
  }
  opened.checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(args.model));
  check_parallel_config(opened.checkpoint->config(), parallel);  // before any device is opened
  if (args.device == "cuda")
    opened.runner = make_cuda_runner(opened.checkpoint, cuda);
  else
    opened.runner = make_cpu_runner(opened.checkpoint, parallel, args.threads);
  return opened;
}

}  // namespace moeserve::cli
