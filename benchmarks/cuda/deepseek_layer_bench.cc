// One DeepSeek-R1 decoder layer of each kind at full width on one GPU (issue 17's per-layer figures), beside its
// byte and FLOP floors (benchmarks/deepseek/layer_floors.h) at ceilings measured in the same run, and full R1 on
// 8 GPUs projected from them (r1_projection.h; deepseek_projection re-prints it from --json).
//
// Method: the synthetic DeepSeek-R1 at 4 layers (random FP8 weights of R1's shapes made on the GPU, as
// --synthetic deepseek-r1 --synthetic-layers 4 makes them: layers 0-2 dense as in the real model, layer 3 MoE) on
// the DeepSeek CUDA runner, whose decoder layer is public (DeepseekCudaRunner::decoder_layer, the code the runner's
// forward and the MTP head run). Timing a layer directly, not the difference of two model depths, keeps the
// embedding, lm_head and host work out of the figure and needs no second model. A step of a given shape
// is planned on the runner (plan_layer_step) over a latent pool of one layer made here, its cached rows filled with
// random values; then layer 3 (MoE) and layer 0 (dense) run over it one call at a time: the residual stream x is
// restored before each call (untimed) and the call is timed by CUDA events on the runner's stream; the median of
// --reps calls after two warm-ups is reported. A call is one whole layer as the runner runs it: input RMSNorm,
// MLA (q_a, q_a_norm, q_b, kv_a, latent cache write, absorb, attention, un-absorb, o), the residual add and
// post-attention RMSNorm, the FFN (router, noaux_tc, grouping, routed experts, shared expert, combine; or the
// dense MLP). The lm_head is timed alone (the runner's projection) over the step's logits rows.
// The runner's defaults hold unless the environment names others: routed experts v2 (MOESERVE_DEEPSEEK_EXPERTS=v1 for
// version 1) and the expanded MLA prefill (MOESERVE_DEEPSEEK_MLA_PREFILL=absorbed keeps every token absorbed). With
// the expanded form a step's sequences take the expanded MLA prefill (kv_b expansion, FlashAttention-2) by the
// runner's rule as forward() plans it (a whole prompt does while the expansion scratch holds
// its rows; decode and verify steps stay absorbed): the header line, each prefill row and the JSON (mla_prefill,
// expanded_sequences) say which ran, and which routed experts' kernel (routed_experts).
// Routed experts the step touched are counted from the router: its logits and noaux_tc's choice are recomputed on
// the layer's own post-attention state (same inputs, same kernels) and the experts with a row are counted.
//
// Ceilings: the device-to-device copy bandwidth and cuBLASLt's bf16 rate (bench_common's measure_ceilings), and
// the FP8 matrix rate of cuBLASLt's block-scaled FP8 GEMM (the runner's FP8 projection path: e4m3 activations with
// a scale per token per 128 columns, e4m3 weights with 128 x 128 block scales) at 8192^3.
//   deepseek_layer_bench [--decode-batches 1,8,64,256,1024] [--context 2048] [--verify-tokens 4]
//                        [--prefill 1x4096,16x1024] [--reps 10] [--kv-cache-dtype auto] [--json FILE]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <span>

#include "bench_common.h"
#include "layer_floors.h"
#include "r1_projection.h"
#include "runner/cuda/blas.h"
#include "runner/cuda/cuda_runner_factory.h"
#include "runner/cuda/deepseek_cuda_runner.h"
#include "runner/cuda/fp8_block_layout.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/step_metadata.h"
#include "util/error.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using deepseek_bench::LayerStep;

constexpr int kBlockSize = 16;
constexpr int kDenseLayer = 0, kMoeLayer = 3, kSyntheticLayers = 4;  // layers 0-2 dense, 3 MoE
constexpr int64_t kMaxStepTokens = 65536;          // a step's tokens (the runner's activation buffers grow with them)
constexpr size_t kMemoryMargin = size_t{2} << 30;  // left free beside a step's latent pool

// A layer's time two ways: its kernels launched one by one, as the DeepSeek runner runs a step (it has no CUDA
// graphs yet), and the same call captured into a CUDA graph and replayed, which leaves out the host's launch gaps.
// The floors and the projection take the graph's time; where capture fails the launched time stands in, and the
// row says so (timing) with the reason.
struct LayerTime {
  double launched_us = 0, graph_us = 0;
  std::string capture_error;  // empty when the graph was captured
  double us() const { return capture_error.empty() ? graph_us : launched_us; }
  std::string timing() const { return capture_error.empty() ? "graph" : "launched (no graph: " + capture_error + ")"; }
};

struct Figure {
  std::string what;
  LayerStep step;
  int64_t head_rows = 0;
  int expanded_sequences = 0;  // the step's sequences whose attention took the expanded form (MLA prefill)
  LayerTime moe, dense;
  double head_us = 0, touched = 0;
  // --breakdown: each layer's GPU time by kernel class (kernel_timer.h), launched (ungraphed), summed over reps.
  cuda::KernelTimes moe_classes, dense_classes;
};

// Median microseconds of `reps` calls of launch() on `stream`, each after prepare() (untimed), after 2 warm-ups.
template <typename Prepare, typename Launch>
double median_us(cudaStream_t stream, int reps, Prepare&& prepare, Launch&& launch) {
  for (int i = 0; i < 2; ++i) prepare(), launch();
  std::vector<cudaEvent_t> events(2 * reps);
  for (cudaEvent_t& e : events) MOESERVE_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    prepare();
    MOESERVE_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    launch();
    MOESERVE_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
  }
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]));
    us[i] = ms * 1e3;
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
  return us[reps / 2];
}

// launch() captured once into a CUDA graph on `stream`, then timed as median_us times it; capture_error set (and
// the time 0) when the capture fails.
template <typename Prepare, typename Launch>
LayerTime time_layer(cudaStream_t stream, int reps, Prepare&& prepare, Launch&& launch) {
  LayerTime t;
  t.launched_us = median_us(stream, reps, prepare, launch);
  cudaGraph_t graph = nullptr;
  MOESERVE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    launch();
  } catch (const std::exception& e) {
    t.capture_error = e.what();
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (t.capture_error.empty() && ended != cudaSuccess) t.capture_error = cudaGetErrorString(ended);
  cudaGetLastError();  // a failed capture's error is reported in capture_error, not left for the next check
  cudaGraphExec_t exec = nullptr;
  if (t.capture_error.empty()) MOESERVE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (exec == nullptr) return t;
  t.graph_us = median_us(stream, reps, prepare, [&] { MOESERVE_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  cudaGraphExecDestroy(exec);
  return t;
}

// cuBLASLt's block-scaled FP8 GEMM at n^3 on random e4m3 values with unit scales, bf16 out: FLOP/s.
double measure_fp8_flops_per_s() {
  const int64_t n = 8192;
  const int64_t x_scales = cuda::fp8_activation_scale_count(n, n), w_scales = cuda::fp8_weight_scale_count(n, n);
  DeviceBuffer x(n * n), w(n * n), xs(x_scales * 4), ws(w_scales * 4), y(n * n * 2);
  cuda::launch_fill_e4m3(nullptr, x.as<uint8_t>(), n * n, 5);
  cuda::launch_fill_e4m3(nullptr, w.as<uint8_t>(), n * n, 6);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, xs.get(), x_scales, 7, 1.0f, 0.0f);
  cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, ws.get(), w_scales, 8, 1.0f, 0.0f);
  cuda::Blas blas;
  std::string why;
  MOESERVE_CHECK(blas.has_fp8_block_algorithm(n, n, n, cuda::Precision::bf16, &why),
                 "cuBLASLt has no block-scaled FP8 GEMM at {}^3, so the FP8 rate cannot be measured: {}", n, why);
  const double us = bench_cuda::event_time_us(
      [&] {
        blas.linear_fp8_block(nullptr, x.as<uint8_t>(), xs.as<float>(), n, w.as<uint8_t>(), ws.as<float>(), n, n,
                              cuda::Precision::bf16, y.get());
      },
      10, 2);
  return 2.0 * n * n * n / (us * 1e-6);
}

// A step of shape s planned on the runner, over a latent pool of one layer made here whose cached rows hold random
// values: each sequence its own run of blocks, its tokens at positions context .. context + tokens - 1.
struct PlannedStep {
  std::vector<int32_t> ids;
  std::vector<std::vector<int32_t>> tables;
  cuda::StepMetadata meta;
  cuda::DeepseekCudaRunner::Plan plan;
  DeviceBuffer meta_device, pool;
  cuda::StepView view;
  cuda::MlaCacheView cache;

  PlannedStep(cuda::DeepseekCudaRunner& runner, const std::string& what, const LayerStep& s) {
    const deepseek_v3::Config& c = runner.model_config();
    const int64_t T = s.total_tokens();
    MOESERVE_CHECK(T <= kMaxStepTokens, "{}: {} tokens in one step (at most {})", what, T, kMaxStepTokens);
    const int64_t blocks_each = (s.context + s.tokens + kBlockSize - 1) / kBlockSize;
    tables.assign(s.sequences, std::vector<int32_t>(blocks_each));
    ids.resize(T);
    for (int64_t i = 0; i < T; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab_size);
    ForwardBatch batch;
    for (int64_t q = 0; q < s.sequences; ++q) {
      std::iota(tables[q].begin(), tables[q].end(), static_cast<int32_t>(q * blocks_each));
      SequenceStep seq;
      seq.tokens = std::span<const int32_t>(ids).subspan(q * s.tokens, s.tokens);
      seq.start_position = static_cast<int32_t>(s.context);
      seq.block_tables.emplace_back(tables[q]);
      seq.num_logits = 0;
      batch.sequences.push_back(std::move(seq));
    }
    const KvCacheLayout layout{kBlockSize, s.sequences * blocks_each};
    plan = runner.plan_layer_step(batch, layout, 0, meta);
    meta_device = cuda::to_device(meta.host());
    view = meta.view(meta_device.as<int32_t>());

    const cuda::MlaCacheShape shape{c.kv_lora_rank, c.qk_rope_head_dim, kBlockSize, 1};
    const size_t pool_bytes =
        layout.num_blocks * cuda::mla_block_elements(shape) * cuda::kv_element_bytes(runner.kv_dtype());
    const size_t free_bytes = cuda::device_memory().free;
    MOESERVE_CHECK(pool_bytes + kMemoryMargin <= free_bytes,
                   "{}: its latent pool takes {:.1f} GB and {:.1f} GB are free", what, pool_bytes / 1e9,
                   free_bytes / 1e9);
    pool = DeviceBuffer(pool_bytes);
    cuda::fill_kv_random(runner.stream(), runner.kv_dtype(), pool.get(), pool_bytes, 21);
    cache = {pool.get(), shape, runner.kv_dtype()};
  }
};

// Times one step shape: layer 3 (MoE), layer 0 (dense), the lm_head; counts the experts layer 3 touched.
class LayerTimer {
 public:
  LayerTimer(cuda::DeepseekCudaRunner& runner, int reps, bool breakdown)
      : runner_(runner), reps_(reps), breakdown_(breakdown) {}

  Figure time(const std::string& what, const LayerStep& s, int64_t head_rows) {
    const deepseek_v3::Config& c = runner_.model_config();
    cudaStream_t stream = runner_.stream();
    const PlannedStep step(runner_, what, s);
    const int64_t T = s.total_tokens();
    const size_t x_bytes = static_cast<size_t>(T) * c.hidden_size * 4;
    DeviceBuffer x0(x_bytes), x(x_bytes);
    cuda::launch_fill_uniform(stream, cuda::Precision::f32, x0.get(), T * c.hidden_size, 22, 0.0f, 1.0f);
    auto restore = [&] {
      MOESERVE_CUDA_CHECK(cudaMemcpyAsync(x.get(), x0.get(), x_bytes, cudaMemcpyDeviceToDevice, stream));
    };
    auto layer = [&](int index) {
      return [&, index] {
        runner_.decoder_layer(runner_.weights().layers[index], step.cache, 0, step.plan, step.view, x.as<float>());
      };
    };
    Figure f;
    f.what = what;
    f.step = s;
    f.head_rows = head_rows;
    f.expanded_sequences = static_cast<int>(step.plan.expanded.size());
    f.moe = time_layer(stream, reps_, restore, layer(kMoeLayer));
    f.dense = time_layer(stream, reps_, restore, layer(kDenseLayer));
    if (breakdown_) {
      f.moe_classes = classes_of(restore, layer(kMoeLayer));
      f.dense_classes = classes_of(restore, layer(kDenseLayer));
    }
    restore();
    layer(kMoeLayer)();
    f.touched = count_touched_experts(x.as<float>(), step.plan);
    const int rows = static_cast<int>(std::min(head_rows, T));
    logits_.grow(static_cast<size_t>(rows) * c.vocab_size * 4);
    f.head_us = median_us(
        stream, reps_, [] {},
        [&] { runner_.project(normed_.get(), rows, runner_.weights().lm_head, logits_.as<float>()); });
    return f;
  }

 private:
  // launch()'s GPU time by kernel class over reps_ launched (ungraphed) calls, each after restore(), after a warm-up.
  template <typename Restore, typename Launch>
  cuda::KernelTimes classes_of(Restore&& restore, Launch&& launch) {
    cuda::KernelTimer& timer = runner_.kernel_timer();
    restore();
    launch();
    timer.reset();
    timer.set_enabled(true);
    for (int i = 0; i < reps_; ++i) {
      restore();
      launch();
      timer.finish_step(runner_.stream(), 0.0);
    }
    timer.set_enabled(false);
    const cuda::KernelTimes times = timer.totals();
    timer.reset();
    return times;
  }

  // Layer 3's routing over x (its residual stream after attention): post-attention RMSNorm, router logits,
  // noaux_tc as the runner's FFN runs them; experts with at least one row. Leaves the normed rows in normed_.
  double count_touched_experts(float* x, const cuda::DeepseekCudaRunner::Plan& plan) {
    const deepseek_v3::Config& c = runner_.model_config();
    const cuda::DeepseekDeviceLayer& w = runner_.weights().layers[kMoeLayer];
    cudaStream_t stream = runner_.stream();
    const int T = plan.tokens, E = c.n_routed_experts, k = c.num_experts_per_tok;
    const size_t A = cuda::element_bytes(runner_.precision());
    if (normed_.grow(static_cast<size_t>(plan.padded_tokens) * c.hidden_size * A))
      MOESERVE_CUDA_CHECK(cudaMemsetAsync(normed_.get(), 0, normed_.bytes(), stream));
    router_logits_.grow(static_cast<size_t>(T) * E * 4);
    experts_.grow(static_cast<size_t>(T) * k * 4);
    weights_.grow(static_cast<size_t>(T) * k * 4);
    counts_.grow(static_cast<size_t>(E) * 4);
    MOESERVE_CUDA_CHECK(cudaMemsetAsync(counts_.get(), 0, counts_.bytes(), stream));  // the router adds to them
    // No delta: x is only read.
    cuda::launch_add_rms_norm(stream, runner_.precision(), x, nullptr, nullptr, w.post_attention_norm, T, c.hidden_size,
                              static_cast<float>(c.rms_norm_eps), normed_.get());
    runner_.project(normed_.get(), T, w.router, router_logits_.as<float>());
    const cuda::NoauxTcRouting noaux{E, c.n_group,        c.topk_group,
                                     k, c.norm_topk_prob, static_cast<float>(c.routed_scaling_factor)};
    cuda::launch_route_noaux_tc(stream, router_logits_.as<float>(), w.router_bias, T, noaux, experts_.as<int32_t>(),
                                weights_.as<float>(), counts_.as<int32_t>());
    std::vector<int32_t> counts(E);
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(counts.data(), counts_.get(), E * 4, cudaMemcpyDeviceToHost, stream));
    MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return static_cast<double>(std::count_if(counts.begin(), counts.end(), [](int32_t n) { return n > 0; }));
  }

  cuda::DeepseekCudaRunner& runner_;
  int reps_;
  bool breakdown_;
  DeviceBuffer normed_, router_logits_, experts_, weights_, counts_, logits_;
};

// PROMPTSxLENGTH, both positive.
LayerStep parse_prefill(const std::string& text) {
  const auto x = text.find('x');
  MOESERVE_CHECK(x != std::string::npos, "--prefill {}: PROMPTSxLENGTH", text);
  int64_t prompts = 0, length = 0;
  try {
    prompts = std::stoll(text.substr(0, x));
    length = std::stoll(text.substr(x + 1));
  } catch (const std::exception&) {
    fail("--prefill {}: PROMPTSxLENGTH", text);
  }
  MOESERVE_CHECK(prompts >= 1 && length >= 1 && length <= 131072 && prompts * length <= kMaxStepTokens,
                 "--prefill {}: prompts >= 1, 1 <= length <= 131072, at most {} tokens in all", text, kMaxStepTokens);
  return {prompts, length, 0};
}

nlohmann::json floor_json(const deepseek_bench::LayerFloor& f, double us, const bench_cuda::Ceilings& ceilings,
                          double fp8_flops_per_s) {
  const double byte_us = deepseek_bench::byte_floor_seconds(f, ceilings.copy_bytes_per_s) * 1e6;
  const double flop_us = deepseek_bench::flop_floor_seconds(f, fp8_flops_per_s, ceilings.bf16_flops_per_s) * 1e6;
  return {{"attention_weight_bytes", f.attention_weight_bytes},
          {"router_bytes", f.router_bytes},
          {"shared_expert_bytes", f.shared_expert_bytes},
          {"routed_expert_bytes", f.routed_expert_bytes},
          {"dense_mlp_bytes", f.dense_mlp_bytes},
          {"latent_kv_bytes", f.latent_kv_bytes},
          {"bytes", f.bytes()},
          {"gemm_flops", f.gemm_flops},
          {"attention_core_flops", f.attention_core_flops},
          {"byte_floor_us", byte_us},
          {"flop_floor_us", flop_us},
          {"of_byte_floor", byte_us / us},
          {"of_flop_floor", flop_us / us},
          {"tflop_per_s", f.flops() / us * 1e-6},
          {"of_fp8_rate", f.flops() / (us * 1e-6) / fp8_flops_per_s}};
}

// The MOESERVE_* variables set for this run (kernel choices such as MOESERVE_MLA_DECODE), recorded with its figures.
nlohmann::json moeserve_environment() {
  nlohmann::json env = nlohmann::json::object();
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto equals = entry.find('=');
    if (entry.rfind("MOESERVE_", 0) == 0 && equals != std::string::npos)
      env[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  return env;
}

// The floor of kernel class k of a layer (layer_floors.h's split of it), or none.
const deepseek_bench::ClassFloor* class_floor(const deepseek_bench::LayerClassFloors& f, cuda::KernelClass k) {
  using cuda::KernelClass;
  switch (k) {
    case KernelClass::qkv_projection: return &f.qkv_projection;
    case KernelClass::rope_kv_write: return &f.kv_write;
    case KernelClass::latent_expansion: return &f.latent_expansion;
    case KernelClass::attention_prefill: return &f.attention_prefill;
    case KernelClass::attention_decode: return &f.attention_decode;
    case KernelClass::output_projection: return &f.output_projection;
    case KernelClass::router: return &f.router;
    case KernelClass::expert_mlp1: return &f.experts_gate_up;
    case KernelClass::expert_mlp2: return &f.experts_down;
    case KernelClass::dense_mlp: return &f.mlp;
    default: return nullptr;
  }
}

// --breakdown: per step, each kernel class's us a layer call (launched) in the MoE and the dense layer beside its
// floor at the run's measured rates, into the step's JSON row too.
void print_breakdowns(const std::vector<Figure>& figures, nlohmann::json& rows, const deepseek_v3::Config& c,
                      int kv_bytes, const bench_cuda::Ceilings& ceilings, double fp8_flops_per_s) {
  for (size_t i = 0; i < figures.size(); ++i) {
    const Figure& f = figures[i];
    const bool expanded = f.expanded_sequences > 0;
    const deepseek_bench::LayerClassFloors moe_floors =
        deepseek_bench::layer_class_floors(c, f.step, true, f.touched, kv_bytes, expanded);
    const deepseek_bench::LayerClassFloors dense_floors =
        deepseek_bench::layer_class_floors(c, f.step, false, 0, kv_bytes, expanded);
    const double moe_calls = static_cast<double>(std::max<int64_t>(f.moe_classes.steps, 1));
    const double dense_calls = static_cast<double>(std::max<int64_t>(f.dense_classes.steps, 1));
    fmt::print("\n{} by kernel class, us a layer (launched; {} calls; floors at the rates above)\n", f.what,
               f.moe_classes.steps);
    fmt::print(
        "| kernel class | MoE layer us | floor us | of floor | share | dense layer us | floor us | of floor | share "
        "|\n|---|---|---|---|---|---|---|---|---|\n");
    const double moe_total = f.moe_classes.gpu_ms(), dense_total = f.dense_classes.gpu_ms();
    auto floor_us = [&](const deepseek_bench::LayerClassFloors& floors, int k) {
      const deepseek_bench::ClassFloor* x = class_floor(floors, static_cast<cuda::KernelClass>(k));
      return x == nullptr ? 0.0
                          : 1e6 * x->seconds(ceilings.copy_bytes_per_s, fp8_flops_per_s, ceilings.bf16_flops_per_s);
    };
    auto cells = [](double us, double floor, double total_ms, double class_ms) {
      return fmt::format("{:.1f} | {} | {} | {:.1f}%", us, floor > 0 ? fmt::format("{:.1f}", floor) : "-",
                         floor > 0 && us > 0 ? fmt::format("{:.0f}%", 100 * floor / us) : "-",
                         total_ms > 0 ? 100 * class_ms / total_ms : 0.0);
    };
    nlohmann::json classes = nlohmann::json::array();
    for (int k = 0; k < cuda::kKernelClasses; ++k) {
      const double moe = f.moe_classes.ms[k], dense = f.dense_classes.ms[k];
      if (moe == 0 && dense == 0) continue;
      const auto name = cuda::kernel_class_name(static_cast<cuda::KernelClass>(k));
      const double moe_us = 1e3 * moe / moe_calls, dense_us = 1e3 * dense / dense_calls;
      const double moe_floor = floor_us(moe_floors, k), dense_floor = floor_us(dense_floors, k);
      fmt::print("| {} | {} | {} |\n", name, cells(moe_us, moe_floor, moe_total, moe),
                 cells(dense_us, dense_floor, dense_total, dense));
      classes.push_back({{"class", name},
                         {"moe_layer_us", moe_us},
                         {"moe_floor_us", moe_floor},
                         {"dense_layer_us", dense_us},
                         {"dense_floor_us", dense_floor}});
    }
    fmt::print("| all | {:.1f} | | | | {:.1f} | | | |\n", 1e3 * moe_total / moe_calls, 1e3 * dense_total / dense_calls);
    rows[i]["breakdown"] = classes;
  }
}

// Issue 17's bars: the batch-1 decode MoE layer within 2x of its byte floor; prefill at >= 40% of the FP8 rate.
void print_bars(const nlohmann::json& rows, int context) {
  for (const nlohmann::json& r : rows) {
    const double of_bytes = r["moe_floor"]["of_byte_floor"].get<double>();
    const double of_fp8 = r["moe_floor"]["of_fp8_rate"].get<double>();
    if (r["context"] == context && r["sequences"] == 1 && r["tokens"] == 1)
      fmt::print("bar: batch-1 decode MoE layer at {:.2f}x its byte floor (bar: within 2x): {}\n", 1 / of_bytes,
                 of_bytes >= 0.5 ? "met" : "not met");
    if (r["context"] == 0)
      fmt::print("bar: {} MoE layer at {:.1f}% of the FP8 rate (bar: >= 40%): {}\n", r["what"].get<std::string>(),
                 100 * of_fp8, of_fp8 >= 0.4 ? "met" : "not met");
  }
}

int run(int argc, char** argv) {
  CLI::App app{"One DeepSeek-R1 layer of each kind at full width, beside its floors"};
  std::vector<int> batches = {1, 8, 64, 256, 1024};
  std::vector<std::string> prefills = {"1x4096", "16x1024"};
  int context = 2048, verify_tokens = 4, reps = 10;
  std::string kv_cache_dtype = "auto", json_path;
  app.add_option("--decode-batches", batches, "decode batches (1024: the Offline projection's concurrency)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--context", context, "cached tokens of every decode and verify sequence")
      ->check(CLI::Range(1, 131072))
      ->capture_default_str();
  app.add_option("--verify-tokens", verify_tokens, "tokens of one sequence's MTP verify step (k + 1; 0: none)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  app.add_option("--prefill", prefills, "PROMPTSxLENGTH steps from an empty cache (none: skip)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--reps", reps, "timed calls per figure (median)")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--kv-cache-dtype", kv_cache_dtype, "latent cache: auto (bf16), bf16 or fp8_e4m3")
      ->check(CLI::IsMember({"auto", "bf16", "fp8_e4m3"}))
      ->capture_default_str();
  app.add_option("--json", json_path, "write the figures here (deepseek_projection --json reads them)");
  bool breakdown = false;
  app.add_flag("--breakdown", breakdown,
               "also time each layer by kernel class (launched, not graphed: the classes include launch gaps)");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::pair<std::string, LayerStep>> shapes;
  for (int b : batches) shapes.push_back({fmt::format("decode {} @ {}", b, context), {b, 1, context}});
  if (verify_tokens > 0)
    shapes.push_back({fmt::format("verify 1 x {} @ {}", verify_tokens, context), {1, verify_tokens, context}});
  for (const std::string& p : prefills) {
    if (p == "none") continue;
    const LayerStep s = parse_prefill(p);
    shapes.push_back({fmt::format("prefill {}x{}", s.sequences, s.tokens), s});
  }

  cudaDeviceProp prop{};
  MOESERVE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const bench_cuda::Ceilings ceilings = bench_cuda::measure_ceilings();
  const double fp8_flops = measure_fp8_flops_per_s();
  fmt::print("{}: copy {:.2f} TB/s (read + write), bf16 {:.0f} TFLOP/s, FP8 block-scaled {:.0f} TFLOP/s\n", prop.name,
             ceilings.copy_bytes_per_s / 1e12, ceilings.bf16_flops_per_s / 1e12, fp8_flops / 1e12);

  CudaRunnerOptions options;
  options.kv_cache_dtype = kv_cache_dtype;
  const auto made = bench_cuda::Clock::now();
  std::unique_ptr<ModelRunner> owned = make_synthetic_deepseek_cuda_runner("deepseek-r1", kSyntheticLayers, 1, options);
  auto* runner = dynamic_cast<cuda::DeepseekCudaRunner*>(owned.get());
  MOESERVE_CHECK(runner != nullptr, "deepseek_layer_bench: a {} runner", owned->name());
  const deepseek_v3::Config& c = runner->model_config();
  MOESERVE_CHECK(!runner->weights().layers[kDenseLayer].moe && runner->weights().layers[kMoeLayer].moe,
                 "synthetic deepseek-r1 at {} layers: layer {} dense and layer {} MoE expected", kSyntheticLayers,
                 kDenseLayer, kMoeLayer);
  const int kv_bytes = static_cast<int>(cuda::kv_element_bytes(runner->kv_dtype()));
  // The form prefill steps' attention takes (MOESERVE_DEEPSEEK_MLA_PREFILL, else the runner's default, expanded;
  // plan_layer_step follows forward()'s rule).
  const std::string mla_prefill = runner->expanded_prefill_possible(kBlockSize) ? "expanded" : "absorbed";
  // The routed experts' kernel (MOESERVE_DEEPSEEK_EXPERTS, else the runner's default, v2).
  const std::string experts = runner->experts_version() == cuda::DeepseekExpertsVersion::v2 ? "v2" : "v1";
  fmt::print(
      "synthetic deepseek-r1, {} layers: {:.1f} GB of weights, made in {:.1f} s; latent cache {} B a value; MLA "
      "prefill: {}; routed experts: {}\n\n",
      kSyntheticLayers, runner->weight_bytes() / 1e9, bench_cuda::seconds_since(made), kv_bytes, mla_prefill,
      experts);

  LayerTimer timer(*runner, reps, breakdown);
  std::vector<Figure> figures;
  nlohmann::json rows = nlohmann::json::array();
  fmt::print(
      "| step | MoE layer us (launched) | byte floor us | of it | FLOP floor us | of it | TFLOP/s | of FP8 | experts "
      "(counted / uniform) | dense layer us (launched) | of its byte floor | lm_head us (rows) |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& [what, s] : shapes) {
    const bool prefill = s.context == 0;
    const Figure& f = figures.emplace_back(timer.time(what, s, prefill ? s.sequences : s.total_tokens()));
    const double uniform = deepseek_bench::expected_touched_experts(c, static_cast<double>(s.total_tokens()));
    const nlohmann::json moe =
        floor_json(deepseek_bench::moe_layer_floor(c, s, f.touched, kv_bytes), f.moe.us(), ceilings, fp8_flops);
    const nlohmann::json dense =
        floor_json(deepseek_bench::dense_layer_floor(c, s, kv_bytes), f.dense.us(), ceilings, fp8_flops);
    fmt::print(
        "| {} | {:.1f} ({:.1f}) | {:.1f} | {:.0f}% | {:.1f} | {:.0f}% | {:.1f} | {:.1f}% | {:.0f} / {:.1f} | "
        "{:.1f} ({:.1f}) | {:.0f}% | {:.1f} ({}) |\n",
        what, f.moe.us(), f.moe.launched_us, moe["byte_floor_us"].get<double>(),
        100 * moe["of_byte_floor"].get<double>(), moe["flop_floor_us"].get<double>(),
        100 * moe["of_flop_floor"].get<double>(), moe["tflop_per_s"].get<double>(),
        100 * moe["of_fp8_rate"].get<double>(), f.touched, uniform, f.dense.us(), f.dense.launched_us,
        100 * dense["of_byte_floor"].get<double>(), f.head_us, f.head_rows);
    for (const LayerTime* t : {&f.moe, &f.dense})
      if (!t->capture_error.empty()) fmt::print("  {}: {}\n", what, t->timing());
    if (prefill && mla_prefill == "expanded")
      fmt::print("  {}: {} of {} sequences' attention in the expanded form\n", what, f.expanded_sequences,
                 s.sequences);
    rows.push_back({{"what", what},
                    {"sequences", s.sequences},
                    {"tokens", s.tokens},
                    {"context", s.context},
                    {"moe_layer_us", f.moe.us()},
                    {"moe_layer_timing", f.moe.timing()},
                    {"moe_layer_launched_us", f.moe.launched_us},
                    {"dense_layer_us", f.dense.us()},
                    {"dense_layer_timing", f.dense.timing()},
                    {"dense_layer_launched_us", f.dense.launched_us},
                    {"lm_head_us", f.head_us},
                    {"lm_head_rows", f.head_rows},
                    {"touched_experts", f.touched},
                    {"touched_experts_uniform", uniform},
                    {"expanded_sequences", f.expanded_sequences},
                    {"moe_floor", moe},
                    {"dense_floor", dense}});
  }
  print_bars(rows, context);
  if (breakdown) print_breakdowns(figures, rows, c, kv_bytes, ceilings, fp8_flops);

  const nlohmann::json json = {{"gpu", prop.name},
                               {"model", "synthetic deepseek-r1, 4 layers (3 dense, 1 MoE)"},
                               {"copy_tb_per_s", ceilings.copy_bytes_per_s / 1e12},
                               {"bf16_tflop_per_s", ceilings.bf16_flops_per_s / 1e12},
                               {"fp8_tflop_per_s", fp8_flops / 1e12},
                               {"kv_cache_dtype", kv_cache_dtype},
                               {"kv_element_bytes", kv_bytes},
                               {"mla_prefill", mla_prefill},
                               {"routed_experts", experts},
                               {"reps", reps},
                               {"environment", moeserve_environment()},
                               {"rows", rows}};
  bench_cuda::write_json(json_path, json);

  // The projection, where the figures it needs were measured (the defaults measure them).
  deepseek_bench::ProjectionSettings settings;
  settings.context = context;
  settings.mtp_steps = std::max(verify_tokens - 1, 1);
  try {
    fmt::print("\n{}",
               deepseek_bench::format_projections(deepseek_bench::measurements_from_json(json, "this run"), settings));
  } catch (const std::exception& e) {
    fmt::print("\nno projection: {}\n", e.what());
  }
  return 0;
}

}  // namespace
}  // namespace moeserve

int main(int argc, char** argv) {
  return moeserve::bench_cuda::bench_main("deepseek_layer_bench", moeserve::run, argc, argv);
}
