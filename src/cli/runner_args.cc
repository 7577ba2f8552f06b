#include "cli/runner_args.h"

#include <filesystem>

#include "runner/cpu/cpu_runner.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "util/error.h"

namespace moeserve::cli {

void add_runner_options(CLI::App* command, RunnerArgs& args) {
  command->add_option("--model", args.model, "model directory");
  command->add_option("--synthetic", args.synthetic, "random weights of a real shape, made on the GPU (--device cuda)")
      ->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b"}));
  command->add_option("--device", args.device, "runner")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  command->add_option("--precision", args.precision, "CUDA activations and KV cache: bf16, or f32 (matches the CPU)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  command->add_option("--threads", args.threads, "CPU threads (0: all)")->capture_default_str();
}

OpenedRunner open_runner(const RunnerArgs& args) {
  MOESERVE_CHECK(args.model.empty() != args.synthetic.empty(), "give exactly one of --model and --synthetic");
  CudaRunnerOptions cuda;
  cuda.precision = args.precision;
  OpenedRunner opened;
  opened.threads = args.threads;
  if (!args.synthetic.empty()) {
    MOESERVE_CHECK(args.device == "cuda", "--synthetic needs --device cuda");
    opened.runner = make_synthetic_cuda_runner(args.synthetic, 0, cuda);
    return opened;
  }
  MOESERVE_CHECK(!std::filesystem::exists(args.model) || std::filesystem::is_directory(args.model),
                 "--model {} is a file, not a directory: give the model directory (the one holding config.json and "
                 "the *.safetensors files)",
                 args.model);
  opened.checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(args.model));
  if (args.device == "cuda")
    opened.runner = make_cuda_runner(opened.checkpoint, cuda);
  else
    opened.runner = std::make_unique<CpuRunner>(opened.checkpoint, args.threads);
  return opened;
}

}  // namespace moeserve::cli
