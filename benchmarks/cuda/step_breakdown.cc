// Where a forward step's GPU time goes, by kernel class (runner/cuda/kernel_timer.h), each class beside its floor
// (step_floors.h) from ceilings measured in the same run, on a synthetic full-size GPT-OSS model:
//   --decode B@C,...    B sequences decoding one token each at context C (random KV)
//   --prefill PxL,...   P prompts of L tokens in one step
//   --mixed B@C+L,...   B decoding sequences at context C and one prefill chunk of L tokens in one step (what the
//                       engine runs while requests are admitted)
//   --engine IxO:N      N requests of I random prompt tokens and O output tokens (temperature 1, no stop tokens),
//                       all submitted at once to the engine (Offline), every step timed; the host's share is
//                       reported too: engine work between steps (scheduling, streaming), and forward() time the GPU
//                       was not busy with kernels (metadata, launches, the sampled tokens' copy back).
// Timed steps run without CUDA graphs (kernel_timer.h says why); graphs save ~0.4 ms a decode step at batch 1
// and less than 0.25 ms at batches 8-32 (docs/PERF.md), so the classes are the graphed step's kernels to that.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "bench_common.h"
#include "engine/engine_core.h"
#include "runner/cuda/cuda_runner.h"
#include "runner/cuda/moe_plan.h"
#include "step_floors.h"
#include "util/error.h"

namespace moeserve {
namespace {

using namespace bench_cuda;
using cuda::KernelClass;
using cuda::kKernelClasses;

// The routing of the step's last layer: experts touched, and the hottest expert's rows against the mean.
struct Routing {
  double touched = 0, hottest_over_mean = 0;
  std::vector<int32_t> rows;  // each expert's rows in the last layer
};
Routing routing_of(cuda::CudaRunner& runner) {
  const std::vector<int32_t> rows = runner.last_layer_expert_rows();
  Routing r;
  r.rows = rows;
  const double total = std::accumulate(rows.begin(), rows.end(), 0.0);
  r.touched = static_cast<double>(std::count_if(rows.begin(), rows.end(), [](int32_t n) { return n > 0; }));
  if (total > 0) r.hottest_over_mean = *std::max_element(rows.begin(), rows.end()) / (total / rows.size());
  return r;
}

struct Breakdown {
  std::string what;
  cuda::KernelTimes times;  // summed over `times.steps` steps
  StepCosts costs{};        // summed over the same steps
  double wall_ms = 0;       // engine runs: wall time of the whole run
  Routing routing;
  int64_t output_tokens = 0;
};

void add_costs(StepCosts& total, const StepCosts& step) {
  for (int i = 0; i < kKernelClasses; ++i) {
    total[i].bytes += step[i].bytes;
    total[i].flops += step[i].flops;
  }
}

// A step of sequences given as (context, new tokens) each: random ids, block tables laid out one after another
// over random KV, temperature-1 sampling as MLPerf's gpt-oss runs use.
struct SyntheticBatch {
  std::vector<std::vector<int32_t>> tables, ids;
  ForwardBatch batch;
  SamplingParams sampling;
  int32_t blocks = 0;
};
void make_batch(SyntheticBatch& b, const ModelConfig& c, const std::vector<std::pair<int, int>>& shapes) {
  const KvGroups kv = kv_groups_of(c);
  const int groups = kv.num_groups(), block_size = 16;
  std::mt19937 rng(7);
  b.sampling.temperature = 1.0f;
  b.batch.return_logits = false;
  b.ids.reserve(shapes.size());
  b.tables.reserve(shapes.size() * groups);
  for (const auto& [context, tokens] : shapes) {
    b.ids.emplace_back(tokens);
    for (int32_t& t : b.ids.back()) t = std::uniform_int_distribution<int32_t>(0, 199997)(rng);
    SequenceStep step;
    step.tokens = b.ids.back();
    step.start_position = context;
    for (int g = 0; g < groups; ++g) {
      // A sliding group holds only the blocks its window still sees (-1 before them), as the engine's tables do.
      std::vector<int32_t>& table = b.tables.emplace_back((context + tokens + block_size - 1) / block_size, -1);
      const bool sliding = kv.kind_of_group[g] == AttentionKind::sliding;
      const int first = sliding ? std::max(0, context - c.sliding_window + 1) / block_size : 0;
      for (size_t i = first; i < table.size(); ++i) table[i] = b.blocks++;
      step.block_tables.emplace_back(table);
    }
    step.num_logits = 1;
    step.sampling = &b.sampling;
    b.batch.sequences.push_back(std::move(step));
  }
}

// One step shape, timed over `steps` steps after two warm-up steps.
Breakdown time_step(cuda::CudaRunner& runner, const std::string& what, const std::vector<std::pair<int, int>>& shapes,
                    int steps) {
  const ModelConfig& c = runner.config();
  SyntheticBatch b;
  make_batch(b, c, shapes);
  runner.allocate_kv_cache({16, b.blocks + 1});
  runner.fill_kv_cache_random(19);
  ForwardOutput out;
  cuda::KernelTimer& timer = runner.kernel_timer();
  timer.set_enabled(true);
  for (int i = 0; i < 2; ++i) runner.forward(b.batch, out);
  timer.reset();
  Breakdown r;
  r.what = what;
  for (int i = 0; i < steps; ++i) runner.forward(b.batch, out);
  r.times = timer.totals();
  timer.set_enabled(false);
  r.routing = routing_of(runner);
  const StepCosts one = step_costs(c, b.batch, r.routing.touched);
  for (int i = 0; i < steps; ++i) add_costs(r.costs, one);
  return r;
}

// The runner seen by the engine, its steps' floors added up as they run.
class CostingRunner : public ModelRunner {
 public:
  explicit CostingRunner(cuda::CudaRunner& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  size_t kv_block_bytes(int block_size) const override { return inner_.kv_block_bytes(block_size); }
  size_t device_memory_free() const override { return inner_.device_memory_free(); }
  void allocate_kv_cache(const KvCacheLayout& layout) override { inner_.allocate_kv_cache(layout); }
  const KvCacheLayout& kv_cache_layout() const override { return inner_.kv_cache_layout(); }
  void forward(const ForwardBatch& batch, ForwardOutput& output) override {
    inner_.forward(batch, output);
    const Routing routing = routing_of(inner_);
    add_costs(costs, step_costs(inner_.config(), batch, routing.touched));
    hottest_sum += routing.hottest_over_mean;
    ++steps;
  }
  StepCosts costs{};
  double hottest_sum = 0;
  int64_t steps = 0;

 private:
  cuda::CudaRunner& inner_;
};

Breakdown time_engine(cuda::CudaRunner& runner, int input, int output, int requests, const SchedulerConfig& scheduler,
                      double kv_fraction) {
  CostingRunner costing(runner);
  EngineConfig config;
  config.kv_cache_fraction = kv_fraction;
  config.scheduler = scheduler;
  config.learn_step_cost = false;
  EngineCore core(costing, config);
  std::mt19937 rng(12345);
  Breakdown r;
  r.what = fmt::format("engine {} x ({} in / {} out), max_num_seqs {}, max_batched_tokens {}", requests, input,
                       output, scheduler.max_num_seqs, scheduler.max_batched_tokens);
  for (int i = 0; i < requests; ++i) {
    RequestSpec spec;
    spec.prompt.resize(input);
    for (int32_t& t : spec.prompt) t = std::uniform_int_distribution<int32_t>(0, 199997)(rng);
    spec.max_tokens = output;
    spec.sampling.temperature = 1.0f;
    spec.sampling.seed = static_cast<uint64_t>(i);
    core.add_request(static_cast<uint64_t>(i), std::move(spec),
                     [&](const RequestEvent& e) { r.output_tokens += static_cast<int64_t>(e.tokens.size()); });
  }
  cuda::KernelTimer& timer = runner.kernel_timer();
  timer.reset();
  timer.set_enabled(true);
  const auto start = Clock::now();
  while (core.has_work()) core.step();
  r.wall_ms = seconds_since(start) * 1e3;
  r.times = timer.totals();
  timer.set_enabled(false);
  r.costs = costing.costs;
  r.routing.hottest_over_mean = costing.steps ? costing.hottest_sum / costing.steps : 0;
  fmt::print("  {}: {} output tokens in {:.1f} s ({:.0f} tok/s, without CUDA graphs), {}\n", r.what, r.output_tokens,
             r.wall_ms / 1e3, r.output_tokens / (r.wall_ms / 1e3), core.capacity_summary());
  return r;
}

nlohmann::json report(const Breakdown& r, const Ceilings& ceilings) {
  const double steps = static_cast<double>(std::max<int64_t>(r.times.steps, 1));
  nlohmann::json classes = nlohmann::json::array();
  fmt::print("\n{} ({} steps; hottest expert {:.2f}x the mean)\n", r.what, r.times.steps, r.routing.hottest_over_mean);
  fmt::print("| kernel class | ms a step | floor ms | of floor | share |\n|---|---|---|---|---|\n");
  const double gpu = r.times.gpu_ms();
  double floor_total = 0;
  for (int i = 0; i < kKernelClasses; ++i) {
    const double ms = r.times.ms[i] / steps, floor = floor_ms(r.costs[i], ceilings) / steps;
    floor_total += floor;
    if (ms == 0 && floor == 0) continue;
    const auto name = cuda::kernel_class_name(static_cast<KernelClass>(i));
    fmt::print("| {} | {:.3f} | {} | {} | {:.1f}% |\n", name, ms, floor > 0 ? fmt::format("{:.3f}", floor) : "-",
               floor > 0 ? fmt::format("{:.0f}%", 100 * floor / ms) : "-", 100 * r.times.ms[i] / gpu);
    classes.push_back({{"class", name}, {"ms_per_step", ms}, {"floor_ms_per_step", floor},
                       {"bytes_per_step", r.costs[i].bytes / steps}, {"flops_per_step", r.costs[i].flops / steps}});
  }
  const double host_gap = (r.times.host_ms - gpu) / steps;
  fmt::print("| all kernels | {:.3f} | {:.3f} | {:.0f}% | |\n", gpu / steps, floor_total, 100 * floor_total * steps / gpu);
  fmt::print("| forward() not on kernels (host work, waits) | {:.3f} | | | |\n", host_gap);
  // The last layer's rows per expert, and what they make of the grouped GEMM's 128-row tiles: an expert's last
  // tile costs it a whole tile whatever its rows (docs/PERF.md, prefill_wgmma_split).
  if (!r.routing.rows.empty()) {
    std::vector<int32_t> sorted = r.routing.rows;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    int64_t total = 0, tiles = 0, last_small[2] = {0, 0};
    constexpr int kTile = cuda::kMoePrefillTileRows, kNarrow = cuda::kMoeSplitSmallTileRows;
    for (int32_t n : sorted) {
      total += n;
      tiles += (n + kTile - 1) / kTile;
      if (n % kTile != 0 && n % kTile <= kNarrow) ++last_small[0];
      if (n % kTile > kNarrow && n % kTile <= 2 * kNarrow) ++last_small[1];
    }
    fmt::print("expert rows, last layer (most first): {}\n", fmt::join(sorted, " "));
    fmt::print("128-row tiles: {} for {} rows ({:.1f} full tiles' worth); last tiles of 1-32 rows: {}, of 33-64: {}\n",
               tiles, total, total / 128.0, last_small[0], last_small[1]);
  }
  nlohmann::json j = {{"what", r.what},           {"steps", r.times.steps},   {"classes", classes},
                      {"gpu_ms_per_step", gpu / steps}, {"floor_ms_per_step", floor_total},
                      {"forward_host_gap_ms_per_step", host_gap},
                      {"hottest_expert_over_mean", r.routing.hottest_over_mean},
                      {"expert_rows_last_layer", r.routing.rows}};
  if (r.wall_ms > 0) {
    const double outside = (r.wall_ms - r.times.host_ms) / steps;
    fmt::print("| engine between steps (scheduling, streaming) | {:.3f} | | | |\n", outside);
    fmt::print("wall {:.1f} s: kernels {:.1f}%, forward() host share {:.1f}%, engine between steps {:.1f}%\n",
               r.wall_ms / 1e3, 100 * gpu / r.wall_ms, 100 * (r.times.host_ms - gpu) / r.wall_ms,
               100 * (r.wall_ms - r.times.host_ms) / r.wall_ms);
    j["wall_s"] = r.wall_ms / 1e3;
    j["engine_between_steps_ms_per_step"] = outside;
    j["output_tokens"] = r.output_tokens;
    j["output_tokens_per_s_without_graphs"] = r.output_tokens / (r.wall_ms / 1e3);
  }
  return j;
}

// "B@C" -> (B, C); "B@C+L" -> also L; "PxL" -> (P, L).
std::vector<int> numbers(const std::string& text, const std::string& separators, size_t count) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = text.find_first_of(separators, at);
    const std::string part = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    MOESERVE_CHECK(!part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() < 9,
                   "\"{}\": expected {} numbers separated by {}", text, count, separators);
    out.push_back(std::stoi(part));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  MOESERVE_CHECK(out.size() == count, "\"{}\": expected {} numbers separated by {}", text, count, separators);
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"GPU time of a CUDA runner step by kernel class, beside each class's floor"};
  std::string shape = "gpt-oss-120b", router = "uniform", json_path;
  std::vector<std::string> decodes, prefills, mixed, engines;
  int steps = 5;
  SchedulerConfig scheduler;
  scheduler.max_num_seqs = 1024;
  scheduler.max_batched_tokens = 8192;
  double kv_fraction = 0.9;
  app.add_option("--synthetic", shape)->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b"}))->capture_default_str();
  app.add_option("--synthetic-router", router, "uniform or zipf[:S]")->capture_default_str();
  app.add_option("--decode", decodes, "B@C: B sequences decoding at context C")->delimiter(',');
  app.add_option("--prefill", prefills, "PxL: P prompts of L tokens")->delimiter(',');
  app.add_option("--mixed", mixed, "B@C+L: B decoding sequences at context C and a prefill chunk of L")->delimiter(',');
  app.add_option("--engine", engines, "IxO:N: N requests of I prompt and O output tokens through the engine")
      ->delimiter(',');
  app.add_option("--steps", steps, "timed steps per shape")->capture_default_str();
  app.add_option("--max-num-seqs", scheduler.max_num_seqs)->capture_default_str();
  app.add_option("--max-batched-tokens", scheduler.max_batched_tokens)->capture_default_str();
  app.add_option("--kv-cache-fraction", kv_fraction)->capture_default_str();
  app.add_option("--json", json_path, "write the breakdowns here");
  std::string activation_dtype = "auto";
  app.add_option("--activation-dtype", activation_dtype, "auto, bf16 or fp8 (moeserve's flag)")->capture_default_str();
  std::string moe_path_table;
  app.add_option("--moe-path-table", moe_path_table, "MoE kernels by rows per expert (moeserve's flag)");
  bool expert_out_fp32 = false;
  app.add_flag("--expert-out-fp32", expert_out_fp32,
               "the experts' second projection writes fp32 rows (the default: bf16 where its path can; "
               "CudaRunnerOptions::expert_out_bf16)");
  int dense_fp8_min = CudaRunnerOptions{}.dense_fp8_min_rows;
  app.add_option("--dense-fp8-min", dense_fp8_min, "with FP8 activations: FP8 QKV and output projections from this "
                 "many tokens a step (0: never; cuda_bench's flag)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const Ceilings ceilings = measure_ceilings();
  fmt::print("measured copy {:.2f} TB/s (read + write), bf16 matmul {:.0f} TFLOP/s\n", ceilings.copy_bytes_per_s / 1e12,
             ceilings.bf16_flops_per_s / 1e12);
  CudaRunnerOptions options;
  options.synthetic_router = router;
  options.activation_dtype = activation_dtype;
  options.moe_path_table = moe_path_table;
  options.dense_fp8_min_rows = dense_fp8_min;
  options.expert_out_bf16 = !expert_out_fp32;
  std::unique_ptr<ModelRunner> owned = make_synthetic_cuda_runner(shape, 1, options);
  auto& runner = dynamic_cast<cuda::CudaRunner&>(*owned);
  nlohmann::json json = {{"model", shape},
                         {"synthetic_router", router},
                         {"activation_dtype", activation_dtype},
                         {"moe_path_table", moe_path_table.empty() ? "built-in" : moe_path_table},
                         {"dense_fp8_min_rows", dense_fp8_min},
                         {"expert_out_bf16", !expert_out_fp32},
                         {"copy_tb_per_s", ceilings.copy_bytes_per_s / 1e12},
                         {"bf16_tflop_per_s", ceilings.bf16_flops_per_s / 1e12},
                         {"breakdowns", nlohmann::json::array()}};
  auto add = [&](const Breakdown& b) { json["breakdowns"].push_back(report(b, ceilings)); };
  for (const std::string& d : decodes) {
    const std::vector<int> v = numbers(d, "@", 2);
    add(time_step(runner, fmt::format("decode batch {} @ {}", v[0], v[1]),
                  std::vector<std::pair<int, int>>(v[0], {v[1], 1}), steps));
  }
  for (const std::string& p : prefills) {
    const std::vector<int> v = numbers(p, "x", 2);
    add(time_step(runner, fmt::format("prefill {} x {}", v[0], v[1]),
                  std::vector<std::pair<int, int>>(v[0], {0, v[1]}), steps));
  }
  for (const std::string& m : mixed) {
    const std::vector<int> v = numbers(m, "@+", 3);
    std::vector<std::pair<int, int>> shapes(v[0], {v[1], 1});
    shapes.emplace_back(0, v[2]);
    add(time_step(runner, fmt::format("mixed: {} decoding @ {} + prefill chunk of {}", v[0], v[1], v[2]), shapes,
                  steps));
  }
  for (const std::string& e : engines) {
    const std::vector<int> v = numbers(e, "x:", 3);
    add(time_engine(runner, v[0], v[1], v[2], scheduler, kv_fraction));
  }
  write_json(json_path, json);
  return 0;
}

}  // namespace
}  // namespace moeserve

int main(int argc, char** argv) { return moeserve::bench_cuda::bench_main("step_breakdown", moeserve::run, argc, argv); }
