#include "cli/engine_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cli/cli_flags.h"
#include "engine/scheduler.h"
#include "engine/speculative/test_drafters.h"
#include "runner/cpu/eagle3_drafter.h"
#include "runner/cpu/mtp_drafter.h"
#include "runner/cuda/cuda_drafter_factory.h"
#include "util/error.h"
#include "util/parse.h"

namespace moeserve::cli {

void add_engine_options(CLI::App* command, EngineArgs& args) {
  EngineConfig& c = args.config;
  command->add_option("--kv-cache-size", args.kv_cache_size,
                      "KV cache memory, e.g. 4GiB (default: what --gpu-memory-utilization leaves on a GPU, 1GiB on "
                      "the CPU)");
  command->add_option("--gpu-memory-utilization", args.gpu_memory_utilization,
                      "fraction of the GPU's total memory the engine may use, weights included; the KV cache gets "
                      "what the rest leaves (default 0.9, as vLLM)")
      ->check(CLI::Range(0.0, 1.0));
  add_deprecated_option<double>(command, "--kv-cache-fraction",
                                "--gpu-memory-utilization (a fraction of the GPU's total memory for the whole engine; "
                                "--kv-cache-fraction was the KV cache's share of the memory the weights leave free)",
                                [&c](const double& fraction) { c.kv_cache_fraction = fraction; });
  command->add_option("--block-size", c.block_size, "tokens per KV block")->capture_default_str();
  command->add_option("--max-model-len", c.max_model_len,
                      "longest prompt plus output a request may have (default: the model's context); the KV cache "
                      "must hold one such sequence")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--max-num-seqs", args.max_num_seqs,
                      fmt::format("sequences running at once (default {} on a GPU, {} on the CPU)", kGpuMaxNumSeqs,
                                  SchedulerConfig{}.max_num_seqs))
      ->check(CLI::Range(1, 1 << 20));
  command
      ->add_option("--max-num-batched-tokens", args.max_batched_tokens,
                   fmt::format("tokens per engine step (default {} on a GPU, {} on the CPU)", kGpuMaxBatchedTokens,
                               SchedulerConfig{}.max_batched_tokens))
      ->check(CLI::Range(1, 1 << 24));
  add_deprecated_option<int>(command, "--max-batched-tokens", "--max-num-batched-tokens",
                             [&args](const int& tokens) { args.max_batched_tokens = tokens; })
      ->check(CLI::Range(1, 1 << 24));
  command->add_option("--scheduler", args.scheduler, "fcfs, or slo (TTFT/TPOT-aware)")
      ->check(CLI::IsMember({"fcfs", "slo"}))
      ->capture_default_str();
  // Milliseconds, as MLPerf's ttft_latency / tpot_latency and vLLM's benchmarks give them (the engine keeps
  // seconds); the names say the unit, since the old flags took seconds.
  const SchedulerConfig defaults;
  command
      ->add_option_function<double>(
          "--ttft-target-ms", [&args](const double& ms) { args.ttft_target_seconds = ms / 1000; },
          fmt::format("slo scheduler: p99 TTFT target, ms (default {:g}; bench: the scenario's TTFT bound)",
                      defaults.ttft_target_seconds * 1000))
      ->check(CLI::PositiveNumber);
  command
      ->add_option_function<double>(
          "--tpot-target-ms", [&args](const double& ms) { args.tpot_target_seconds = ms / 1000; },
          fmt::format("slo scheduler: p99 TPOT target, ms (default {:g}; bench: the scenario's TPOT bound)",
                      defaults.tpot_target_seconds * 1000))
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--slo-expected-output-tokens", c.scheduler.expected_output_tokens,
                   "slo scheduler: output tokens expected of a request that may stop early (stop tokens), for "
                   "projecting its mean TPOT (default: learnt from finished requests; one that runs to max_tokens "
                   "is expected to)")
      ->check(CLI::Range(1, 1 << 24));
  add_deprecated_option<double>(command, "--ttft-target", "--ttft-target-ms (milliseconds; this one took seconds)",
                                [&args](const double& seconds) { args.ttft_target_seconds = seconds; });
  add_deprecated_option<double>(command, "--tpot-target", "--tpot-target-ms (milliseconds; this one took seconds)",
                                [&args](const double& seconds) { args.tpot_target_seconds = seconds; });
  command->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", args.prefix_caching,
                    "reuse KV across requests that share a prefix (default: on)");
  add_deprecated_flag(command, "--no-prefix-caching", "--no-enable-prefix-caching",
                      [&args] { args.prefix_caching = false; });
  command->add_flag("--async-scheduling,!--no-async-scheduling", c.async_scheduling,
                    "schedule and prepare the next step on the host while the runner runs this one (vLLM's "
                    "--async-scheduling; the same tokens as without; default: off until measured on the GPU)");
  command->add_option("--speculative-config", args.speculative_config,
                      "speculative decoding as JSON, e.g. '{\"method\":\"eagle3\",\"model\":\"DIR\","
                      "\"num_speculative_tokens\":3}' (DeepSeek-V3/R1: '{\"method\":\"mtp\","
                      "\"num_speculative_tokens\":3}', its MTP layer); trees: \"speculative_eagle_topk\", "
                      "\"speculative_num_draft_tokens\" (tokens verified per step, root included)");
}

int64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  const std::optional<double> value = parse_double_prefix(text, used);
  MOESERVE_CHECK(value && *value > 0, "\"{}\" is not a size (examples: 4GiB, 512MiB, 1000000)", text);
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KiB") scale = 1024.0;
  if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (unit == "KB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  MOESERVE_CHECK(scale > 0, "\"{}\": unknown unit \"{}\" (B, KiB, MiB, GiB, KB, MB, GB)", text, unit);
  return static_cast<int64_t>(std::llround(*value * scale));
}

namespace {

// The EAGLE-3 head beside a CUDA target runs on the same GPU. Its KV pool is allocated here, before the engine
// sizes the target's pool from the memory then free. It gets as many blocks as the target's pool would: a head
// block holds block_size positions of its one layer, while a target token takes a block in every KV group, so
// the head holds at least as many tokens as the target. The cap of 5% of free memory rarely binds: a head block
// is 1/18 of gpt-oss-120b's target block (18 layers per KV group), i.e. 5% of free memory at the default 0.9
// fraction; for gpt-oss-20b (1/12) it leaves the head 2/3 of the target's block count, still more token slots
// than the target's two groups hold.
constexpr double kCudaDrafterMaxMemoryFraction = 0.05;

std::shared_ptr<speculative::Drafter> make_cuda_drafter(const speculative::SpeculativeConfig& spec,
                                                        const OpenedRunner& opened, const EngineConfig& engine) {
  const ModelRunner& runner = *opened.runner;
  CudaDrafterOptions options;
  options.block_size = engine.block_size;
  options.num_blocks = kv_blocks_for(runner, engine);
  options.max_memory_fraction = kCudaDrafterMaxMemoryFraction;
  if (spec.model == "synthetic") return make_synthetic_cuda_eagle3_drafter(runner.config(), options, 1);
  MOESERVE_CHECK(opened.checkpoint != nullptr,
                 "--speculative-config method eagle3 with a head directory needs a checkpoint (--model): the head "
                 "shares its embeddings (with --synthetic targets use \"model\": \"synthetic\")");
  auto head = std::shared_ptr<const speculative::Eagle3Checkpoint>(
      speculative::Eagle3Checkpoint::open(spec.model, runner.config()));
  return make_cuda_eagle3_drafter(head, speculative::Eagle3Target::of(opened.checkpoint), options);
}

// A DeepSeek-V3 model drafts with its MTP layer (method mtp, or SGLang's eagle), with a latent pool of as many
// blocks as the target's: a drafter block holds block_size positions of one layer. Beside the CUDA runner the head
// runs on the GPU, on the target's kernels (chains only, no CUDA graphs yet); beside the CPU runner on the CPU.
std::shared_ptr<speculative::Drafter> make_mtp_drafter(const speculative::SpeculativeConfig& spec,
                                                       const OpenedRunner& opened, const EngineConfig& engine) {
  MOESERVE_CHECK(spec.method == "mtp" || spec.method == "eagle",
                 "--speculative-config method {}: a DeepSeek-V3 model drafts with its MTP layer (method mtp, or "
                 "eagle as SGLang names it)",
                 spec.method);
  MOESERVE_CHECK(spec.model.empty(), "--speculative-config: the DeepSeek-V3 model drafts with its own MTP layer; leave "
                 "out \"model\" (\"{}\")", spec.model);
  if (opened.runner->name() == "cuda") {
    MOESERVE_CHECK(spec.eagle_topk == 1,
                   "--speculative-config speculative_eagle_topk {}: the MTP head on the GPU drafts chains only so far "
                   "(topk 1)", spec.eagle_topk);
    CudaDrafterOptions options;
    options.block_size = engine.block_size;
    options.num_blocks = kv_blocks_for(*opened.runner, engine);
    options.cuda_graphs = false;
    return make_cuda_mtp_drafter(opened.deepseek, *opened.runner, options);
  }
  speculative::MtpDrafterOptions options;
  options.block_size = engine.block_size;
  options.num_blocks = kv_blocks_for(*opened.runner, engine);
  options.threads = opened.threads;
  return std::make_shared<speculative::MtpDrafter>(opened.deepseek, options);
}

std::shared_ptr<speculative::Drafter> make_drafter(const speculative::SpeculativeConfig& spec, const OpenedRunner& opened,
                                                   const EngineConfig& engine) {
  const ModelRunner& runner = *opened.runner;
  if (spec.method == "test_random") return std::make_shared<speculative::RandomDrafter>(runner.config().vocab_size);
  if (opened.deepseek) return make_mtp_drafter(spec, opened, engine);
  MOESERVE_CHECK(spec.method == "eagle3", "--speculative-config method {} needs a DeepSeek-V3 model (its MTP layer); "
                 "gpt-oss drafts with an EAGLE-3 head (method eagle3)", spec.method);
  if (runner.name() == "cuda") return make_cuda_drafter(spec, opened, engine);
  MOESERVE_CHECK(spec.model != "synthetic",
                 "--speculative-config \"model\": \"synthetic\" (random head weights) needs the CUDA runner "
                 "(--device cuda); the {} runner drafts with a head directory", runner.name());
  MOESERVE_CHECK(opened.checkpoint != nullptr,
                 "--speculative-config method eagle3 needs a checkpoint (--model): the head shares its embeddings");
  auto head = std::shared_ptr<const speculative::Eagle3Checkpoint>(
      speculative::Eagle3Checkpoint::open(spec.model, runner.config()));
  speculative::Eagle3DrafterOptions options;
  options.block_size = engine.block_size;
  options.num_blocks = kv_blocks_for(runner, engine);
  options.threads = opened.threads;
  return std::make_shared<speculative::Eagle3Drafter>(head, speculative::Eagle3Target::of(opened.checkpoint), options);
}

// What one sequence of max_model_len takes: the blocks of every KV group (a sliding group only its window's),
// as the engine's block manager counts them.
struct OneSequence {
  int64_t tokens = 0;
  int64_t blocks = 0;
  int64_t bytes = 0;
};

OneSequence one_sequence(const ModelRunner& runner, const EngineConfig& c) {
  const ModelConfig& model = runner.config();
  OneSequence one;
  one.tokens = c.max_model_len > 0 ? std::min(c.max_model_len, model.max_position_embeddings)
                                   : model.max_position_embeddings;
  const KvCacheManager counter(kv_groups_of(model), model.sliding_window, 1, c.block_size, false);
  one.blocks = counter.blocks_needed(one.tokens);
  one.bytes = one.blocks * static_cast<int64_t>(runner.kv_block_bytes(c.block_size));
  return one;
}

std::string mib_text(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// vLLM's --gpu-memory-utilization: the engine may use this share of the GPU's total memory; what the weights,
// the runner's buffers (and a draft head) already hold counts against it, and the KV cache gets the rest.
int64_t kv_bytes_for_utilization(const ModelRunner& runner, double utilization) {
  const auto total = static_cast<double>(runner.device_memory_total());
  const double in_use = total - static_cast<double>(runner.device_memory_free());
  const double budget = utilization * total;
  MOESERVE_CHECK(budget > in_use,
                 "--gpu-memory-utilization {} allows {} of the GPU's {}, but {} is already in use (weights, buffers, "
                 "other processes): nothing is left for the KV cache; raise it", utilization,
                 mib_text(static_cast<int64_t>(budget)), mib_text(static_cast<int64_t>(total)),
                 mib_text(static_cast<int64_t>(in_use)));
  return static_cast<int64_t>(budget - in_use);
}

}  // namespace

EngineConfig engine_config(const EngineArgs& args, const OpenedRunner& opened) {
  const ModelRunner& runner = *opened.runner;
  const bool device_runner = runner.device_memory_free() > 0;
  EngineConfig c = args.config;
  MOESERVE_CHECK(c.block_size > 0, "--block-size {} must be positive", c.block_size);
  c.scheduler.policy = parse_scheduling_policy(args.scheduler);
  c.scheduler.ttft_target_seconds = args.ttft_target_seconds.value_or(c.scheduler.ttft_target_seconds);
  c.scheduler.tpot_target_seconds = args.tpot_target_seconds.value_or(c.scheduler.tpot_target_seconds);
  c.scheduler.max_num_seqs = args.max_num_seqs.value_or(device_runner ? kGpuMaxNumSeqs : c.scheduler.max_num_seqs);
  c.scheduler.max_batched_tokens =
      args.max_batched_tokens.value_or(device_runner ? kGpuMaxBatchedTokens : c.scheduler.max_batched_tokens);
  c.prefix_caching = args.prefix_caching;
  const OneSequence one = one_sequence(runner, c);
  const int budgets = !args.kv_cache_size.empty() + args.gpu_memory_utilization.has_value() + (c.kv_cache_fraction > 0);
  MOESERVE_CHECK(budgets <= 1, "give at most one of --kv-cache-size, --gpu-memory-utilization and --kv-cache-fraction");
  std::optional<double> utilization = args.gpu_memory_utilization;
  if (!args.kv_cache_size.empty()) {
    c.kv_cache_bytes = parse_byte_size(args.kv_cache_size);
  } else if (c.kv_cache_fraction <= 0) {
    MOESERVE_CHECK(device_runner || !utilization,
                   "--gpu-memory-utilization needs a GPU runner (--device cuda); the {} runner's KV cache is sized by "
                   "--kv-cache-size", runner.name());
    if (device_runner) {
      if (!utilization) utilization = 0.9;
      c.kv_cache_bytes = kv_bytes_for_utilization(runner, *utilization);
    } else {  // host memory: 1 GiB, or one full sequence where that is more
      c.kv_cache_bytes = std::max(int64_t{1} << 30, one.bytes);
    }
  }
  // vLLM refuses to start as well when the KV cache cannot hold one sequence of max_model_len: otherwise the
  // server would start and then refuse every long request.
  const int64_t blocks = kv_blocks_for(runner, c);
  MOESERVE_CHECK(blocks >= one.blocks,
                 "the KV cache ({} blocks of {} tokens, {}) cannot hold one sequence of {} tokens (--max-model-len, "
                 "default the model's context of {}), which needs {} blocks ({}): give --kv-cache-size {}MiB or more, "
                 "or a smaller --max-model-len",
                 blocks, c.block_size, mib_text(blocks * static_cast<int64_t>(runner.kv_block_bytes(c.block_size))),
                 one.tokens, runner.config().max_position_embeddings, one.blocks, mib_text(one.bytes),
                 (one.bytes + (1 << 20) - 1) >> 20);
  c.speculative = speculative::parse_speculative_config(args.speculative_config);
  if (c.speculative.enabled()) {
    c.drafter = make_drafter(c.speculative, opened, c);
    // A draft head on the GPU took its memory out of the same budget.
    if (utilization) c.kv_cache_bytes = kv_bytes_for_utilization(runner, *utilization);
  }
  return c;
}

}  // namespace moeserve::cli
