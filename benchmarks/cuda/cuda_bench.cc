// Times the CUDA runner on a synthetic full-size model (random weights of gpt-oss-20b / gpt-oss-120b's shapes,
// made on the GPU) and sets each figure beside its roofline, from ceilings measured in the same run:
//   decode (batch B, context C): one token per sequence per step, CUDA graphs, KV filled with random values;
//     roofline = bytes one step must read (dense weights, the experts the batch touches, KV, unembedding) over
//     the measured device-to-device copy bandwidth;
//   prefill (N prompts of L tokens in one step): roofline = the step's FLOPs (projections, the four experts of
//     every token, causal attention, the logits row) over the measured bf16 matrix-product rate;
//   offline (--offline N): N requests submitted at once to the engine (scheduler, paged KV, prefix cache) on
//     this runner, prompts of 2,500..7,500 random tokens (mean 5,000), outputs of 625..1,875 tokens (mean
//     1,250, no stop tokens); output tokens/s over the wall time until the last finishes.
//   verify (--verify-tokens T, speculative decoding): like decode but every sequence brings T = k + 1 tokens (the
//     last verified token and k draft tokens, causal), with T logits rows sampled; its cost against the one-token
//     decode step at the same batch is what speculation must beat. The table's speculation rows model tokens/s
//     at per-position acceptance a: B (1 - a^(k+1)) / (1 - a) tokens per (verify step + k draft steps), the draft
//     step priced at the bytes of an EAGLE-3 head for this shape over the copy bandwidth (a model, not a
//     measurement).
//   speculation end to end (--spec-engine-batches B,..): B requests of --spec-prompt random tokens decoding
//     --spec-output tokens each through the engine, without speculation and with an EAGLE-3 draft head of the
//     real gpt-oss shape with random weights on the GPU (make_synthetic_cuda_eagle3_drafter) drafting k tokens
//     (--spec-k), the target accepting each draft position with probability --spec-acceptance (the engine's
//     test_acceptance_rate TEST SWITCH: outputs are not the model's, which random weights make moot anyway).
//     Tokens/s counts the tokens emitted while all B sequences decode: from the last first token to the first
//     finish, so prefill is left out.
// --pdl launches every kernel with programmatic dependent launch (runner/cuda/programmatic_launch.h; as
// MOESERVE_PDL=1 does), so a kernel's prologue overlaps its predecessor's tail; the JSON records which it was.
// Every step is timed end to end on the host (metadata upload, graph launch, sampled tokens back).
#include <CLI/CLI.hpp>
#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "bench_common.h"
#include "engine/engine.h"
#include "engine/speculative/speculative_config.h"
#include "runner/cuda/blas.h"
#include "runner/cuda/cuda_drafter_factory.h"
#include "runner/cuda/cuda_runner.h"
#include "runner/cuda/programmatic_launch.h"
#include "runner/cuda/tensor_parallel_cuda_runner.h"
#include "util/error.h"

namespace moeserve {
namespace {

using namespace bench_cuda;

struct Row {
  std::string what;
  double tokens_per_s, roofline_tokens_per_s, step_ms;
  std::string note;
};

// profile: the timed steps run between cudaProfilerStart and cudaProfilerStop (ncu --profile-from-start off).
// per_sequence > 1: a verify step of speculative decoding (per_sequence causal tokens, as many logits rows).
// Runner: a CudaRunner, or a TensorParallelCudaRunner (--tensor-parallel-size), which offer the same benchmark calls.
template <typename Runner>
Row time_decode(Runner& runner, int batch, int per_sequence, int context, int steps, bool profile) {
  const ModelConfig& c = runner.config();
  const int block_size = 16, groups = kv_groups_of(c).num_groups();
  const int blocks_each = (context + steps + 2 + per_sequence + block_size - 1) / block_size;
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(batch) * groups * blocks_each});
  runner.fill_kv_cache_random(17);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch) * groups);
  for (size_t i = 0; i < tables.size(); ++i) {
    tables[i].resize(blocks_each);
    std::iota(tables[i].begin(), tables[i].end(), static_cast<int32_t>(i * blocks_each));
  }
  std::vector<int32_t> tokens(static_cast<size_t>(batch) * per_sequence);
  for (size_t s = 0; s < tokens.size(); ++s) tokens[s] = static_cast<int32_t>((s * 7919 + 13) % c.vocab_size);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  ForwardOutput out;
  auto step = [&](int position) {
    ForwardBatch b;
    b.return_logits = false;
    for (int s = 0; s < batch; ++s) {
      SequenceStep seq;
      seq.tokens = std::span(tokens).subspan(static_cast<size_t>(s) * per_sequence, per_sequence);
      seq.start_position = position;
      for (int g = 0; g < groups; ++g) seq.block_tables.emplace_back(tables[static_cast<size_t>(s) * groups + g]);
      seq.num_logits = per_sequence;
      seq.sampling = &greedy;
      b.sequences.push_back(std::move(seq));
    }
    runner.forward(b, out);
    std::copy(out.sampled.begin(), out.sampled.end(), tokens.begin());
  };
  step(context);  // captures the graph
  step(context + 1);
  if (profile) MOESERVE_CUDA_CHECK(cudaProfilerStart());
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step(context + 2 + i);
  const double per_step = seconds_since(start) / steps;
  if (profile) MOESERVE_CUDA_CHECK(cudaProfilerStop());
  Row row;
  row.what = per_sequence == 1 ? fmt::format("decode batch {} @ {}", batch, context)
                                : fmt::format("verify batch {} x {} tokens @ {}", batch, per_sequence, context);
  row.step_ms = per_step * 1e3;
  row.tokens_per_s = static_cast<double>(batch) * per_sequence / per_step;  // tokens processed, not accepted
  row.note = "moe " + runner.moe_path_name(batch * per_sequence);
  return row;
}

template <typename Runner>
Row time_prefill(Runner& runner, int prompts, int length) {
  const ModelConfig& c = runner.config();
  const int block_size = 16, groups = kv_groups_of(c).num_groups();
  const int blocks_each = (length + block_size - 1) / block_size;
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(prompts) * groups * blocks_each});
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(prompts) * groups), ids(prompts);
  for (size_t i = 0; i < tables.size(); ++i) {
    tables[i].resize(blocks_each);
    std::iota(tables[i].begin(), tables[i].end(), static_cast<int32_t>(i * blocks_each));
  }
  for (int s = 0; s < prompts; ++s) {
    ids[s].resize(length);
    for (int i = 0; i < length; ++i) ids[s][i] = static_cast<int32_t>((1000003LL * (i + 1) + 7919 * s) % c.vocab_size);
  }
  ForwardBatch b;
  for (int s = 0; s < prompts; ++s) {
    SequenceStep seq;
    seq.tokens = ids[s];
    for (int g = 0; g < groups; ++g) seq.block_tables.emplace_back(tables[static_cast<size_t>(s) * groups + g]);
    seq.num_logits = 1;
    b.sequences.push_back(std::move(seq));
  }
  ForwardOutput out;
  runner.forward(b, out);  // plans, buffers
  std::vector<double> times;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    runner.forward(b, out);
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  bool finite = true;
  for (float v : out.logits) finite = finite && std::isfinite(v);
  MOESERVE_CHECK(finite, "prefill {} x {}: non-finite logits", prompts, length);
  Row row;
  row.what = fmt::format("prefill {} x {}", prompts, length);
  row.step_ms = times[1] * 1e3;
  row.tokens_per_s = static_cast<double>(prompts) * length / times[1];
  row.note = "moe " + runner.moe_path_name(prompts * length);
  return row;
}

struct OfflineResult {
  double seconds = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  std::string capacity;
};

OfflineResult time_offline(std::shared_ptr<ModelRunner> runner, int requests) {
  size_t free_bytes = 0, total_bytes = 0;
  MOESERVE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  EngineConfig config;
  // What the weights leave, less room for a step's activations and logits.
  config.kv_cache_bytes = static_cast<int64_t>(free_bytes) - (int64_t{8} << 30);
  config.scheduler.max_num_seqs = 256;
  config.scheduler.max_batched_tokens = 8192;
  std::mt19937 rng(12345);
  std::vector<RequestSpec> specs(requests);
  OfflineResult result;
  for (auto& spec : specs) {
    spec.prompt.resize(std::uniform_int_distribution<int>(2500, 7500)(rng));
    for (auto& t : spec.prompt) t = std::uniform_int_distribution<int32_t>(0, 199997)(rng);
    spec.max_tokens = std::uniform_int_distribution<int>(625, 1875)(rng);
    spec.sampling.temperature = 0.0f;
    result.input_tokens += static_cast<int64_t>(spec.prompt.size());
  }
  Engine engine(std::move(runner), config);
  result.capacity = engine.capacity_summary();
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  const auto start = Clock::now();
  for (auto& spec : specs)
    engine.submit(std::move(spec), [&](const RequestEvent& e) {
      std::lock_guard lock(mutex);
      result.output_tokens += static_cast<int64_t>(e.tokens.size());
      if (e.finish != FinishReason::none && ++finished == requests) done.notify_all();
    });
  std::unique_lock lock(mutex);
  done.wait(lock, [&] { return finished == requests; });
  result.seconds = seconds_since(start);
  return result;
}

struct SpecResult {
  double tokens_per_s = 0;       // output tokens/s while all sequences decode
  double acceptance_length = 0;  // 0 without speculation
  double step_ms = 0;            // mean wall time per engine step in the window (one verify step + drafting)
  double forward_ms = 0;         // mean target forward (verify or decode step) in the window
  double draft_ms = 0;           // mean drafter call (extend + k draft steps) in the window
};

// Wall time of calls, kept with their start so that a window's calls can be averaged.
struct CallTimes {
  std::vector<std::pair<Clock::time_point, double>> calls;
  double mean_ms(Clock::time_point from, Clock::time_point to) const {
    double total = 0;
    int n = 0;
    for (const auto& [start, seconds] : calls)
      if (start >= from && start < to) total += seconds, ++n;
    return n ? total * 1e3 / n : 0;
  }
};

// The drafter with its calls timed (on the engine thread, which waits for the device in each call).
class TimedDrafter : public speculative::Drafter {
 public:
  explicit TimedDrafter(std::shared_ptr<speculative::Drafter> inner) : inner_(std::move(inner)) {}
  std::vector<int> aux_layers() const override { return inner_->aux_layers(); }
  void propose(std::span<const speculative::DraftInput> inputs, std::vector<speculative::DraftTree>& out) override {
    const auto start = Clock::now();
    inner_->propose(inputs, out);
    times.calls.emplace_back(start, seconds_since(start));
  }
  void release(uint64_t sequence_id) override { inner_->release(sequence_id); }
  CallTimes times;

 private:
  std::shared_ptr<speculative::Drafter> inner_;
};

// The target runner with its forward steps timed.
class TimedRunner : public ModelRunner {
 public:
  explicit TimedRunner(std::shared_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  const ModelConfig& config() const override { return inner_->config(); }
  size_t kv_block_bytes(int block_size) const override { return inner_->kv_block_bytes(block_size); }
  size_t device_memory_free() const override { return inner_->device_memory_free(); }
  void allocate_kv_cache(const KvCacheLayout& layout) override { inner_->allocate_kv_cache(layout); }
  const KvCacheLayout& kv_cache_layout() const override { return inner_->kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override {
    const auto start = Clock::now();
    inner_->forward(batch, output);
    times.calls.emplace_back(start, seconds_since(start));
  }
  void move_kv_slots(std::span<const std::span<const int32_t>> block_tables,
                     std::span<const KvSlotMove> moves) override {
    inner_->move_kv_slots(block_tables, moves);
  }
  CallTimes times;

 private:
  std::shared_ptr<ModelRunner> inner_;
};

// B requests decoding together through the engine; drafter null: no speculation.
SpecResult time_spec_engine(std::shared_ptr<ModelRunner> runner, std::shared_ptr<speculative::Drafter> drafter,
                            int batch, int k, double acceptance, int prompt, int output, uint64_t seed) {
  EngineConfig config;
  // Twice what the batch's sequences can hold (blocks of 16 tokens), not a fixed size: beside gpt-oss-120b's 65 GB
  // of weights and the bench's own KV pool a fixed 16 GB did not fit an H100.
  config.num_kv_blocks = 2 * batch * ((prompt + output + 64) / config.block_size + 2);
  config.scheduler.max_num_seqs = batch;
  config.scheduler.max_batched_tokens = 8192;
  config.prefix_caching = false;
  if (drafter) {
    config.speculative = speculative::parse_speculative_config(
        fmt::format(R"({{"method": "eagle3", "model": "synthetic", "num_speculative_tokens": {},
                        "test_acceptance_rate": {}}})",
                    k, acceptance));
  }
  std::shared_ptr<TimedDrafter> timed;
  if (drafter) config.drafter = timed = std::make_shared<TimedDrafter>(drafter);
  auto timed_runner = std::make_shared<TimedRunner>(std::move(runner));
  std::mt19937 rng(seed);
  std::vector<RequestSpec> specs(batch);
  for (size_t i = 0; i < specs.size(); ++i) {
    RequestSpec& spec = specs[i];
    spec.prompt.resize(prompt);
    for (auto& t : spec.prompt) t = std::uniform_int_distribution<int32_t>(0, 199997)(rng);
    spec.max_tokens = output;
    spec.sampling.temperature = 0.0f;
    // The test switch draws its acceptances from (seed, token index): a seed per request, so that the batch's
    // sequences accept independently instead of in lockstep.
    spec.sampling.seed = seed * 1000 + i;
  }
  struct Stamp {
    Clock::time_point time;
    int tokens;
  };
  std::mutex mutex;
  std::condition_variable done;
  std::vector<Stamp> stamps;
  std::vector<Clock::time_point> first(batch), last(batch);
  std::vector<bool> started(batch, false);
  int finished = 0;
  double acceptance_length = 0;
  {  // the engine's thread is joined at the end of this block, before its timings are read
    Engine engine(timed_runner, config);
    for (int i = 0; i < batch; ++i)
      engine.submit(std::move(specs[i]), [&, i](const RequestEvent& e) {
        const auto now = Clock::now();
        std::lock_guard lock(mutex);
        if (!e.tokens.empty()) {
          if (!started[i]) first[i] = now;
          started[i] = true;
          stamps.push_back({now, static_cast<int>(e.tokens.size())});
        }
        if (e.finish != FinishReason::none) {
          last[i] = now;
          if (++finished == batch) done.notify_all();
        }
      });
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return finished == batch; });
    acceptance_length = engine.metrics().spec_acceptance_length();
  }
  const auto from = *std::max_element(first.begin(), first.end());
  const auto to = *std::min_element(last.begin(), last.end());
  int64_t tokens = 0, events = 0;
  for (const Stamp& s : stamps)
    if (s.time > from && s.time <= to) tokens += s.tokens, ++events;
  SpecResult result;
  const double seconds = std::chrono::duration<double>(to - from).count();
  MOESERVE_CHECK(seconds > 0 && tokens > 0, "speculation run of batch {}: no decode window (raise --spec-output)", batch);
  result.tokens_per_s = tokens / seconds;
  result.step_ms = seconds * 1e3 / (static_cast<double>(events) / batch);
  result.forward_ms = timed_runner->times.mean_ms(from, to);
  if (timed) {
    result.acceptance_length = acceptance_length;
    result.draft_ms = timed->times.mean_ms(from, to);
  }
  return result;
}

// The drafter alone: B sequences holding `context` positions (random features, one buffer shared by all), then
// calls that bring `fed` new positions each and ask for a chain of k (k = 0: the extend step only). Mean wall
// time of a call over `calls` calls, after two warm-up calls (which capture the graph).
double time_drafter_calls(speculative::Drafter& drafter, int feature_width, int batch, int context, int fed, int k,
                          int calls, uint64_t first_id) {
  std::mt19937 rng(first_id);
  std::normal_distribution<float> normal;
  std::vector<float> features(static_cast<size_t>(context) * feature_width);
  for (float& f : features) f = normal(rng);
  std::vector<int32_t> tokens(context + (calls + 2) * fed + 1);
  for (int32_t& t : tokens) t = std::uniform_int_distribution<int32_t>(0, 199997)(rng);
  std::vector<speculative::DraftTree> out;
  auto call = [&](int32_t start, int n, int draft) {
    std::vector<speculative::DraftInput> inputs(batch);
    for (int b = 0; b < batch; ++b) {
      inputs[b].sequence_id = first_id + b;
      inputs[b].start_position = start;
      inputs[b].start_token = tokens[start];
      inputs[b].features = std::span<const float>(features).first(static_cast<size_t>(n) * feature_width);
      inputs[b].next_tokens = std::span<const int32_t>(tokens).subspan(start + 1, n);
      inputs[b].shape = {draft, 1, 0};
    }
    drafter.propose(inputs, out);
  };
  call(0, context, 0);
  int32_t position = context;
  Clock::time_point start;
  for (int i = 0; i < calls + 2; ++i) {
    if (i == 2) start = Clock::now();
    call(position, fed, k);
    position += fed;
  }
  const double ms = seconds_since(start) * 1e3 / calls;
  for (int b = 0; b < batch; ++b) drafter.release(first_id + b);
  return ms;
}

int run(int argc, char** argv) {
  CLI::App app{"CUDA runner benchmark on synthetic full-size GPT-OSS models"};
  std::string shape = "gpt-oss-120b", json_path;
  std::vector<int> batches = {1, 8, 64, 256};
  std::vector<std::string> prefills = {"1x8192", "16x1024"};
  int context = 2048, steps = 20, offline = 0;
  bool profile = false, no_graphs = false;
  std::vector<int> verify_tokens, spec_batches = {1, 8, 32};
  app.add_option("--synthetic", shape)->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b"}))->capture_default_str();
  app.add_option("--decode-batches", batches)->delimiter(',')->capture_default_str();
  app.add_option("--context", context)->capture_default_str();
  app.add_option("--decode-steps", steps)->capture_default_str();
  app.add_option("--prefill", prefills, "PROMPTSxLENGTH")->delimiter(',')->capture_default_str();
  app.add_option("--offline", offline, "requests for the engine's Offline figure (0: skip)")->capture_default_str();
  app.add_option("--verify-tokens", verify_tokens, "tokens per sequence of timed verify steps, e.g. 2,4,8 (k + 1)")
      ->delimiter(',');
  app.add_option("--spec-batches", spec_batches, "batches of the verify steps")->delimiter(',')->capture_default_str();
  std::vector<int> engine_batches, engine_ks = {1, 3, 7};
  std::vector<double> engine_acceptances = {0.7};
  int engine_prompt = 1024, engine_output = 256;
  app.add_option("--spec-engine-batches", engine_batches, "batches of the end-to-end speculation runs (empty: skip)")
      ->delimiter(',');
  app.add_option("--spec-k", engine_ks, "draft lengths of the end-to-end runs")->delimiter(',')->capture_default_str();
  app.add_option("--spec-acceptance", engine_acceptances,
                 "TEST SWITCH: per-position acceptance rates of the end-to-end runs")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--spec-prompt", engine_prompt, "prompt tokens of the end-to-end runs")->capture_default_str();
  app.add_option("--spec-output", engine_output, "output tokens of the end-to-end runs")->capture_default_str();
  std::vector<int> draft_batches;
  app.add_option("--draft-batches", draft_batches,
                 "batches of the drafter-alone timings (synthetic EAGLE-3 head; empty: skip)")
      ->delimiter(',');
  app.add_flag("--profile", profile, "bracket the timed decode steps for ncu --profile-from-start off");
  app.add_flag("--no-graphs", no_graphs, "launch decode steps kernel by kernel (what CUDA graphs save)");
  bool fused_small_steps = false;
  app.add_flag("--fused-small-steps", fused_small_steps,
               "at batches 1-4, the QKV projection with RoPE + KV write, the output projection with add + RMSNorm and "
               "the router with top-k + grouping as one kernel each (CudaRunnerOptions::fused_*; off by default)");
  bool pdl = false;
  app.add_flag("--pdl", pdl, "programmatic dependent launch for every kernel (else MOESERVE_PDL decides, default off)");
  app.add_option("--json", json_path, "write the figures here");
  std::string moe_path_table;
  app.add_option("--moe-path-table", moe_path_table, "MoE kernels by rows per expert (moeserve's flag)");
  std::string activation_dtype = "auto";
  app.add_option("--activation-dtype", activation_dtype, "auto, bf16 or fp8 (moeserve's flag)")->capture_default_str();
  int moe_hot_min = 0;
  app.add_option("--moe-hot-min", moe_hot_min,
                 "prefill-wgmma-hot's rows that make an expert hot (0: its default, 1,024)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  bool expert_out_fp32 = false;
  app.add_flag("--expert-out-fp32", expert_out_fp32,
               "the experts' second projection writes fp32 rows (the default: bf16 where its path can; "
               "CudaRunnerOptions::expert_out_bf16)");
  int dense_fp8_min = CudaRunnerOptions{}.dense_fp8_min_rows;
  app.add_option("--dense-fp8-min", dense_fp8_min,
                 "with --activation-dtype fp8: steps of at least this many tokens run the QKV and output projections "
                 "on FP8 too (0: never)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  bool qkv_fp8_unfused = false;
  app.add_flag("--qkv-fp8-unfused", qkv_fp8_unfused,
               "an FP8 QKV projection quantises its input in a launch of its own and writes fp32 rows "
               "(CudaRunnerOptions::qkv_fp8_fused off)");
  bool o_fp8_unfused = false;
  app.add_flag("--o-fp8-unfused", o_fp8_unfused,
               "an FP8 output projection quantises the attention's bf16 rows in a launch of its own "
               "(CudaRunnerOptions::o_fp8_fused off)");
  bool attention_block_a_unit = false;
  app.add_flag("--attention-block-a-unit", attention_block_a_unit,
               "sliding layers' prefill attention runs one block a unit (CudaRunnerOptions::attention_units_in_turn "
               "off)");
  int tensor_parallel_size = 1;
  app.add_option("--tensor-parallel-size", tensor_parallel_size,
                 "GPUs 0 .. N-1 through NCCL (moeserve's flag); the floors become N times one GPU's")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  bool expert_parallel = false;
  app.add_flag("--enable-expert-parallel", expert_parallel,
               "whole experts a GPU instead of each expert split (moeserve's flag; needs --tensor-parallel-size > 1)");
  CLI11_PARSE(app, argc, argv);
  if (pdl) cuda::set_programmatic_launch(true);
  const bool programmatic_launch = cuda::programmatic_launch_enabled();

  cudaDeviceProp prop{};
  MOESERVE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const Ceilings ceilings = measure_ceilings();
  fmt::print("{}: {} SMs; measured copy {:.2f} TB/s (read + write), bf16 matmul {:.0f} TFLOP/s\n", prop.name,
             prop.multiProcessorCount, ceilings.copy_bytes_per_s / 1e12, ceilings.bf16_flops_per_s / 1e12);
  fmt::print("programmatic dependent launch {}\n", programmatic_launch ? "on" : "off");
  auto made = Clock::now();
  CudaRunnerOptions runner_options;
  runner_options.cuda_graphs = !no_graphs;
  runner_options.fused_qkv_rope = runner_options.fused_o_norm = runner_options.fused_router = fused_small_steps;
  runner_options.moe_path_table = moe_path_table;
  runner_options.moe_hot_min_rows = moe_hot_min;
  runner_options.dense_fp8_min_rows = dense_fp8_min;
  runner_options.expert_out_bf16 = !expert_out_fp32;
  runner_options.qkv_fp8_fused = !qkv_fp8_unfused;
  runner_options.attention_units_in_turn = !attention_block_a_unit;
  runner_options.o_fp8_fused = !o_fp8_unfused;
  runner_options.activation_dtype = activation_dtype;
  runner_options.tensor_parallel_size = tensor_parallel_size;
  runner_options.expert_parallel = expert_parallel;
  std::shared_ptr<ModelRunner> owned = make_synthetic_cuda_runner(shape, 1, runner_options);
  auto* single = dynamic_cast<cuda::CudaRunner*>(owned.get());
  auto* split = dynamic_cast<cuda::TensorParallelCudaRunner*>(owned.get());
  MOESERVE_CHECK(single != nullptr || split != nullptr, "cuda_bench: a {} runner", owned->name());
  auto decode_row = [&](int batch, int per_sequence, bool prof) {
    return single ? time_decode(*single, batch, per_sequence, context, steps, prof)
                  : time_decode(*split, batch, per_sequence, context, steps, prof);
  };
  auto prefill_row = [&](int prompts, int length) {
    return single ? time_prefill(*single, prompts, length) : time_prefill(*split, prompts, length);
  };
  // With N GPUs the floors are N times one GPU's: an upper bound, since each GPU also reads the whole embedding and
  // unembedding.
  const double gpus = tensor_parallel_size;
  fmt::print("{}: weights {:.1f} GB on {} device(s), made in {:.1f} s\n", shape,
             (single ? single->weight_bytes() : split->weight_bytes()) / 1e9, tensor_parallel_size,
             seconds_since(made));
  const ModelConfig& c = owned->config();

  std::vector<Row> rows;
  for (int b : batches) {
    Row row = decode_row(b, 1, profile);
    row.roofline_tokens_per_s = gpus * b / (decode_bytes(c, b, context) / ceilings.copy_bytes_per_s);
    fmt::print("  {}: {:.1f} tok/s ({:.2f} ms/step)\n", row.what, row.tokens_per_s, row.step_ms);
    rows.push_back(row);
  }
  for (const std::string& p : prefills) {
    if (p.empty() || p == "none") continue;
    const auto x = p.find('x');
    MOESERVE_CHECK(x != std::string::npos, "--prefill {}: PROMPTSxLENGTH", p);
    const int prompts = std::stoi(p.substr(0, x)), length = std::stoi(p.substr(x + 1));
    Row row = prefill_row(prompts, length);
    row.roofline_tokens_per_s = gpus * prompts * length / (prefill_flops(c, prompts, length) / ceilings.bf16_flops_per_s);
    fmt::print("  {}: {:.0f} tok/s ({:.1f} ms)\n", row.what, row.tokens_per_s, row.step_ms);
    rows.push_back(row);
  }

  // Speculative decoding: verify steps beside one-token decode steps at the same batch.
  std::vector<std::string> spec_lines;
  for (int b : verify_tokens.empty() ? std::vector<int>{} : spec_batches) {
    const Row decode = decode_row(b, 1, false);
    const double draft_ms = eagle3_draft_step_bytes(c) / ceilings.copy_bytes_per_s * 1e3;
    for (int t : verify_tokens) {
      Row row = decode_row(b, t, false);
      row.roofline_tokens_per_s = gpus * b * t / (step_bytes(c, b, b * t, context) / ceilings.copy_bytes_per_s);
      fmt::print("  {}: {:.2f} ms/step, {:.2f}x the decode step\n", row.what, row.step_ms, row.step_ms / decode.step_ms);
      const int k = t - 1;
      std::string line = fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.2f}x | {:.0f} |", b, k, decode.step_ms,
                                     row.step_ms, row.step_ms / decode.step_ms, decode.tokens_per_s);
      for (double a : {0.5, 0.7, 0.9}) {
        const double accepted = (1 - std::pow(a, k + 1)) / (1 - a);  // expected tokens per verify step
        line += fmt::format(" {:.0f} |", b * accepted / ((row.step_ms + k * draft_ms) * 1e-3));
      }
      spec_lines.push_back(line);
      rows.push_back(row);
    }
  }

  if (offline > 0) {
    const OfflineResult r = time_offline(owned, offline);
    Row row;
    row.what = fmt::format("offline {} requests", offline);
    row.tokens_per_s = r.output_tokens / r.seconds;
    row.step_ms = r.seconds * 1e3;
    // Roofline: every output token needs one decode pass over the weights at the engine's batch (~256), the
    // prompts one prefill; both at the rates modelled above.
    const double decode_s = r.output_tokens * decode_bytes(c, 256, 5000 + 625) / 256 / ceilings.copy_bytes_per_s;
    const double prefill_s = prefill_flops(c, 1, 5000) / 5000 * r.input_tokens / ceilings.bf16_flops_per_s;
    row.roofline_tokens_per_s = gpus * r.output_tokens / (decode_s + prefill_s);
    row.note = fmt::format("{} in / {} out tokens; {}", r.input_tokens, r.output_tokens, r.capacity);
    fmt::print("  {}: {:.0f} output tok/s over {:.1f} s\n", row.what, row.tokens_per_s, r.seconds);
    rows.push_back(row);
  }

  // Speculation end to end: the engine with the synthetic EAGLE-3 head on the GPU against no speculation.
  std::vector<std::string> engine_lines;
  if (!engine_batches.empty()) {
    CudaDrafterOptions options;
    options.num_blocks = (int64_t{engine_prompt} + engine_output + 64) / options.block_size * 
        *std::max_element(engine_batches.begin(), engine_batches.end()) + 64;
    const auto drafter_made = Clock::now();
    std::shared_ptr<speculative::Drafter> drafter = make_synthetic_cuda_eagle3_drafter(c, options, 7);
    fmt::print("synthetic EAGLE-3 head made in {:.1f} s\n", seconds_since(drafter_made));
    for (int b : engine_batches) {
      const SpecResult base = time_spec_engine(owned, nullptr, b, 0, 0, engine_prompt, engine_output, 11);
      fmt::print("  engine batch {} no speculation: {:.0f} tok/s ({:.2f} ms/step)\n", b, base.tokens_per_s,
                 base.step_ms);
      engine_lines.push_back(fmt::format("| {} | none | - | {:.0f} | {:.2f} | {:.2f} | - | 1.00 | 1.00x |", b,
                                         base.tokens_per_s, base.step_ms, base.forward_ms));
      for (double a : engine_acceptances)
        for (int k : engine_ks) {
          const SpecResult r = time_spec_engine(owned, drafter, b, k, a, engine_prompt, engine_output, 11);
          fmt::print("  engine batch {} k {} acceptance {}: {:.0f} tok/s ({:.2f} ms/step, acceptance length {:.2f})\n",
                     b, k, a, r.tokens_per_s, r.step_ms, r.acceptance_length);
          engine_lines.push_back(fmt::format("| {} | {} | {} | {:.0f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f}x |", b,
                                             k, a, r.tokens_per_s, r.step_ms, r.forward_ms, r.draft_ms,
                                             r.acceptance_length, r.tokens_per_s / base.tokens_per_s));
        }
    }
  }

  // The drafter alone, with and without CUDA graphs: what a call costs by batch and draft length.
  std::vector<std::string> draft_lines;
  if (!draft_batches.empty()) {
    CudaDrafterOptions options;
    options.num_blocks = 4096;
    std::shared_ptr<speculative::Drafter> graphed = make_synthetic_cuda_eagle3_drafter(c, options, 7);
    options.cuda_graphs = false;
    std::shared_ptr<speculative::Drafter> direct = make_synthetic_cuda_eagle3_drafter(c, options, 7);
    const int width = 3 * c.hidden_size;
    uint64_t id = 1;
    for (int b : draft_batches)
      for (int fed : {1, 4}) {
        std::string line = fmt::format("| {} | {} |", b, fed);
        for (int k : {0, 1, 3, 7}) {
          line += fmt::format(" {:.3f} |", time_drafter_calls(*graphed, width, b, engine_prompt, fed, k, 10, id));
          id += 1000;
        }
        line += fmt::format(" {:.3f} |", time_drafter_calls(*direct, width, b, engine_prompt, fed, 7, 10, id));
        id += 1000;
        fmt::print("  drafter {}\n", line);
        draft_lines.push_back(line);
      }
  }

  nlohmann::json json = {{"gpu", prop.name},
                         {"model", shape},
                         {"copy_tb_per_s", ceilings.copy_bytes_per_s / 1e12},
                         {"bf16_tflop_per_s", ceilings.bf16_flops_per_s / 1e12},
                         {"moe_path_table", moe_path_table.empty() ? "built-in" : moe_path_table},
                         {"activation_dtype", activation_dtype},
                         {"moe_hot_min_rows", moe_hot_min},
                         {"dense_fp8_min_rows", dense_fp8_min},
                         {"expert_out_bf16", !expert_out_fp32},
                         {"qkv_fp8_fused", !qkv_fp8_unfused},
                         {"attention_units_in_turn", !attention_block_a_unit},
                         {"o_fp8_fused", !o_fp8_unfused},
                         {"tensor_parallel_size", tensor_parallel_size},
                         {"expert_parallel", expert_parallel},
                         {"programmatic_launch", programmatic_launch},
                         {"rows", nlohmann::json::array()}};
  fmt::print("\n| {} | tokens/s | roofline tokens/s | of roofline | ms/step | kernels |\n|---|---|---|---|---|---|\n", shape);
  for (const Row& r : rows) {
    fmt::print("| {} | {:.0f} | {:.0f} | {:.0f}% | {:.2f} | {} |\n", r.what, r.tokens_per_s, r.roofline_tokens_per_s,
               100 * r.tokens_per_s / r.roofline_tokens_per_s, r.step_ms, r.note);
    json["rows"].push_back({{"what", r.what},
                            {"tokens_per_s", r.tokens_per_s},
                            {"roofline_tokens_per_s", r.roofline_tokens_per_s},
                            {"step_ms", r.step_ms},
                            {"note", r.note}});
  }
  if (!spec_lines.empty()) {
    fmt::print("\nspeculation (draft step modelled at {:.3f} ms: EAGLE-3 head bytes over the copy bandwidth)\n",
               eagle3_draft_step_bytes(c) / ceilings.copy_bytes_per_s * 1e3);
    fmt::print("| batch | k | decode ms | verify ms | verify/decode | no-spec tok/s | a=0.5 tok/s | a=0.7 tok/s | "
               "a=0.9 tok/s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& line : spec_lines) fmt::print("{}\n", line);
  }
  if (!draft_lines.empty()) {
    fmt::print("\ndrafter alone (synthetic EAGLE-3 head, {} positions held; ms a call)\n", engine_prompt);
    fmt::print("| batch | positions fed | extend only | k=1 | k=3 | k=7 | k=7 without graphs |\n"
               "|---|---|---|---|---|---|---|\n");
    for (const std::string& line : draft_lines) fmt::print("{}\n", line);
  }
  if (!engine_lines.empty()) {
    fmt::print("\nspeculation end to end (engine; synthetic EAGLE-3 head on the GPU; prompt {}, output {}; "
               "acceptance set by test_acceptance_rate)\n", engine_prompt, engine_output);
    fmt::print("| batch | k | test_acceptance_rate | tokens/s | ms/step | target forward ms | draft ms | "
               "acceptance length | vs no speculation |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& line : engine_lines) fmt::print("{}\n", line);
  }
  write_json(json_path, json);
  return 0;
}

}  // namespace
}  // namespace moeserve

int main(int argc, char** argv) { return moeserve::bench_cuda::bench_main("cuda_bench", moeserve::run, argc, argv); }
