// Every MoE expert GEMM path (runner/cuda/moe_plan.h) on a gpt-oss shape, by rows per expert and routing, timed
// on the device and set beside the ceilings this process measures (copy bandwidth, cuBLASLt bf16 rate):
//   routing: uniform (every expert exactly R rows: T = E R / k tokens, token t's experts (t k + j) mod E under a
//     random relabelling of the experts) or zipf (each token draws k distinct experts with weight 1 / rank, by
//     Gumbel top-k; the same T, so R is the mean); --tokens T instead: decode-shaped steps of T tokens (a batch-1
//     step is 1 token, 4 experts of one row each), the runner's path choice beside them;
//   data: random MXFP4 weights (scales as DeviceWeights::synthetic picks them), biases and bf16 activations, made
//     on the device;
//   per path: the grouping for its tile, then the first projection (SwiGLU fused) and the second on its output,
//     each timed with CUDA events over repetitions after a warm-up (the grouping is not timed);
//   check: first, the path's outputs on sampled grouped rows (the first, the last and 254 at random) against the
//     reference kernel on the same inputs; a path outside the bounds (those of tests/runner/cuda/moe_test.cc)
//     posts no figures;
//   --activation-dtype fp8: the decode_mma paths with FP8 activations (each projection's input quantised per row
//     by launch_quantize_rows_e4m3, timed with it); checked against the bf16 reference within 0.1 (the
//     quantisation's own error, ~3%; tests/runner/cuda/moe_test.cc checks the kernels exactly on quantised
//     inputs), the errors printed;
//   figures: GB/s = bytes of the touched experts' weights (MXFP4 blocks, scales, bias) + the activations read and
//     written once, over the time of both projections; TFLOP/s = 2 x rows x (N K) summed over both.
// Usage: moe_bench [--shape gpt-oss-120b] [--rows 1,2,...,1024 | --tokens 1,8] [--routing uniform,zipf] [--paths ...]
//                  [--min-ms 30] [--json FILE]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "bench_common.h"
#include "model/gpt_oss/make_tiny.h"
#include "model/mxfp4.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/moe_buffers.h"
#include "util/bfloat16.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve {
namespace {

using cuda::DeviceBuffer;
using cuda::MoePath;

struct Experts {
  DeviceBuffer blocks, scales, bias, row_max, wide;
  cuda::ExpertWeightsView view;
  Experts(int E, int64_t out, int64_t in, double output_std, uint64_t key) {
    // Random bytes in the tiled layout (moe_layout.h), pads included: the layout does not change their distribution.
    const int64_t n_blocks = cuda::mxfp4_tiled_elements(E, out, static_cast<int>(in / kMxfp4BlockSize));
    blocks = DeviceBuffer(n_blocks * kMxfp4BlockBytes);
    scales = DeviceBuffer(n_blocks);
    bias = DeviceBuffer(E * out * 4);
    // DeviceWeights::synthetic's rule: outputs of std `output_std` for unit-RMS inputs (e2m1 RMS about 2.93).
    const int exponent = static_cast<int>(std::lround(std::log2(output_std / (std::sqrt(in) * 2.93))));
    cuda::launch_fill_bytes(nullptr, blocks.as<uint8_t>(), n_blocks * kMxfp4BlockBytes, key);
    cuda::launch_fill_scales(nullptr, scales.as<uint8_t>(), n_blocks, key + 1, exponent);
    cuda::launch_fill_uniform(nullptr, cuda::Precision::f32, bias.get(), E * out, key + 2, 0.0f, 0.5f);
    row_max = DeviceBuffer(E * out);
    wide = DeviceBuffer(sizeof(int32_t));
    cuda::launch_mxfp4_row_scale_max(nullptr, scales.as<uint8_t>(), E, out, static_cast<int>(in / kMxfp4BlockSize),
                                     row_max.as<uint8_t>(), wide.as<int32_t>());
    view = {blocks.as<uint8_t>(), scales.as<uint8_t>(), bias.as<float>(), out, in, row_max.as<uint8_t>()};
  }
  // Bytes one expert's weights take (MXFP4 blocks + scales + fp32 bias).
  double expert_bytes() const {
    return static_cast<double>(view.out_features) * view.in_features * (kMxfp4BlockBytes + 1) / kMxfp4BlockSize +
           view.out_features * 4.0;
  }
};

// The experts of T tokens, k distinct each, token-major.
std::vector<int32_t> make_routing(const std::string& kind, int E, int k, int T, std::mt19937& rng) {
  std::vector<int32_t> label(E);
  std::iota(label.begin(), label.end(), 0);
  std::shuffle(label.begin(), label.end(), rng);
  std::vector<int32_t> experts(static_cast<size_t>(T) * k);
  if (kind == "uniform") {
    for (size_t i = 0; i < experts.size(); ++i) experts[i] = label[i % E];
    return experts;
  }
  // Gumbel top-k: the k largest log(w_e) + Gumbel noise are k distinct draws with probability proportional to w_e.
  std::uniform_real_distribution<double> uniform(1e-12, 1.0);
  std::vector<std::pair<double, int>> keys(E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) keys[e] = {-std::log(e + 1.0) - std::log(-std::log(uniform(rng))), label[e]};
    std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), std::greater<>());
    for (int j = 0; j < k; ++j) experts[static_cast<size_t>(t) * k + j] = keys[j].second;
  }
  return experts;
}

// One routing's device state, grouped for a path's tile.
struct Step {
  int T = 0, k = 0, E = 0;
  std::vector<int32_t> experts, counts;
  DeviceBuffer experts_d;
  cuda::MoeBuffers buffers;
  Step(std::vector<int32_t> routing, int tokens, int top_k, int num_experts)
      : T(tokens), k(top_k), E(num_experts), experts(std::move(routing)), counts(num_experts, 0) {
    for (int32_t e : experts) ++counts[e];
    experts_d = cuda::to_device(experts);
    buffers.grow(T, k, E);
  }
  int rows() const { return T * k; }
  int touched() const { return static_cast<int>(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; })); }
  cuda::MoeRouting group(int rows_per_tile, const cuda::MoeMixedBounds& mixed = {}) {
    cuda::MoeRouting r = buffers.routing();
    r.mixed = mixed;
    MOESERVE_CUDA_CHECK(cudaMemcpy(r.expert_counts, counts.data(), E * 4, cudaMemcpyHostToDevice));
    cuda::launch_group_by_expert(nullptr, experts_d.as<int32_t>(), T, k, rows_per_tile, r);
    return r;
  }
};

struct Projections {
  cuda::MoeGemmParams mlp1, mlp2;
  // FP8 activations: each projection's input quantised into these first (mlp1's x has T rows, mlp2's `rows`).
  bool fp8 = false;
  int tokens = 0;
  uint8_t *x_q = nullptr, *act_q = nullptr;
  float *x_scale = nullptr, *act_scale = nullptr;
};

// One projection as the runner launches it: with FP8 activations, its input's quantisation first.
void launch_mlp1(const Projections& p, MoePath path) {
  if (p.fp8)
    cuda::launch_quantize_rows_e4m3(nullptr, p.mlp1.x, p.tokens, p.mlp1.w.in_features, p.x_q, p.x_scale);
  cuda::launch_moe_path(nullptr, path, cuda::Precision::bf16, p.mlp1);
}
void launch_mlp2(const Projections& p, MoePath path) {
  if (p.fp8) cuda::launch_quantize_rows_e4m3(nullptr, p.mlp2.x, p.mlp2.rows, p.mlp2.w.in_features, p.act_q, p.act_scale);
  cuda::launch_moe_path(nullptr, path, cuda::Precision::bf16, p.mlp2);
}

Projections projections(const ModelConfig& c, const Experts& w1, const Experts& w2, const cuda::MoeRouting& routing,
                        int rows, const void* x, void* act, void* y) {
  Projections p;
  p.mlp1.w = w1.view;
  p.mlp1.x = x;
  p.mlp1.x_row = routing.row_token;
  p.mlp1.out = act;
  p.mlp1.swiglu = true;
  p.mlp1.swiglu_alpha = c.swiglu_alpha;
  p.mlp1.swiglu_limit = c.swiglu_limit;
  p.mlp1.routing = routing;
  p.mlp1.rows = rows;
  p.mlp2 = p.mlp1;
  p.mlp2.w = w2.view;
  p.mlp2.x = act;
  p.mlp2.x_row = nullptr;
  p.mlp2.out = y;
  p.mlp2.swiglu = false;
  return p;
}

// Device rows `rows` (each `width` elements of `element` bytes) of a [*, width] array, as floats.
std::vector<float> download_rows(const void* base, int64_t width, bool bf16, const std::vector<int32_t>& rows) {
  const size_t element = bf16 ? 2 : 4;
  std::vector<uint8_t> bytes(rows.size() * width * element);
  for (size_t i = 0; i < rows.size(); ++i)
    MOESERVE_CUDA_CHECK(cudaMemcpy(bytes.data() + i * width * element,
                                   static_cast<const uint8_t*>(base) + rows[i] * width * element, width * element,
                                   cudaMemcpyDeviceToHost));
  std::vector<float> out(rows.size() * width);
  for (size_t i = 0; i < out.size(); ++i) {
    if (bf16) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = bf16_to_float(bits);
    } else {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    }
  }
  return out;
}

struct Errors {
  double relative = 0;  // ||out - ref|| / ||ref||
  double max_abs = 0;   // max |out - ref| / max |ref|
};

Errors compare(const std::vector<float>& out, const std::vector<float>& ref) {
  double diff = 0, norm = 0, worst = 0, largest = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = std::isfinite(out[i]) ? std::abs(static_cast<double>(out[i]) - ref[i]) : INFINITY;
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
    worst = std::max(worst, d);
    largest = std::max(largest, std::abs(static_cast<double>(ref[i])));
  }
  return {std::sqrt(diff / std::max(norm, 1e-300)), worst / std::max(largest, 1e-300)};
}

// The path's outputs (act = mlp1 out, y = mlp2 out, both already computed) on sampled grouped rows against the
// reference kernel on the same inputs: mlp1 from x through the grouping's row_token, mlp2 from the path's own act.
std::pair<Errors, Errors> check_rows(const Projections& p, std::mt19937& rng) {
  const int rows = p.mlp1.rows;
  std::vector<int32_t> sample = {0, rows - 1};
  std::uniform_int_distribution<int> pick(0, rows - 1);
  while (static_cast<int>(sample.size()) < std::min(rows, 256)) sample.push_back(pick(rng));
  const auto row_token = cuda::to_host<int32_t>(p.mlp1.routing.row_token, rows);
  const auto row_expert = cuda::to_host<int32_t>(p.mlp1.routing.row_expert, rows);
  std::vector<int32_t> tokens, experts;
  for (int32_t r : sample) {
    tokens.push_back(row_token[r]);
    experts.push_back(row_expert[r]);
  }
  const int64_t I = p.mlp2.w.in_features, H = p.mlp2.w.out_features;
  DeviceBuffer tokens_d = cuda::to_device(tokens), experts_d = cuda::to_device(experts),
               sample_d = cuda::to_device(sample), act_ref(sample.size() * I * 2), y_ref(sample.size() * H * 4);
  cuda::MoeGemmParams ref1 = p.mlp1, ref2 = p.mlp2;
  ref1.x_fp8 = ref2.x_fp8 = nullptr;  // the reference reads the bf16 inputs
  ref1.x_scale = ref2.x_scale = nullptr;
  ref1.routing.row_expert = ref2.routing.row_expert = experts_d.as<int32_t>();
  ref1.rows = ref2.rows = static_cast<int>(sample.size());
  ref1.x_row = tokens_d.as<int32_t>();
  ref1.out = act_ref.get();
  ref2.x_row = sample_d.as<int32_t>();  // the path's act rows
  ref2.out = y_ref.get();
  cuda::launch_moe_reference(nullptr, cuda::Precision::bf16, ref1);
  cuda::launch_moe_reference(nullptr, cuda::Precision::bf16, ref2);
  MOESERVE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> identity(sample.size());
  std::iota(identity.begin(), identity.end(), 0);
  return {compare(download_rows(p.mlp1.out, I, true, sample), download_rows(act_ref.get(), I, true, identity)),
          compare(download_rows(p.mlp2.out, H, false, sample), download_rows(y_ref.get(), H, false, identity))};
}

// Milliseconds of each projection, averaged over repetitions filling about min_ms after a warm-up.
std::pair<double, double> time_projections(const Projections& p, MoePath path, double min_ms) {
  cudaEvent_t events[3];
  for (cudaEvent_t& e : events) MOESERVE_CUDA_CHECK(cudaEventCreate(&e));
  auto once = [&] {
    MOESERVE_CUDA_CHECK(cudaEventRecord(events[0]));
    launch_mlp1(p, path);
    MOESERVE_CUDA_CHECK(cudaEventRecord(events[1]));
    launch_mlp2(p, path);
    MOESERVE_CUDA_CHECK(cudaEventRecord(events[2]));
    MOESERVE_CUDA_CHECK(cudaEventSynchronize(events[2]));
    float first = 0, second = 0;
    MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&first, events[0], events[1]));
    MOESERVE_CUDA_CHECK(cudaEventElapsedTime(&second, events[1], events[2]));
    return std::pair<double, double>{first, second};
  };
  const auto warm = once();
  const int reps = std::clamp(static_cast<int>(min_ms / std::max(warm.first + warm.second, 1e-3)), 3, 200);
  double first = 0, second = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t = once();
    first += t.first;
    second += t.second;
  }
  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  return {first / reps, second / reps};
}

struct Result {
  std::string path, routing;
  int rows_per_expert = 0, tokens = 0, touched = 0;
  bool ok = false;
  Errors mlp1_error, mlp2_error;
  double mlp1_ms = 0, mlp2_ms = 0, bytes = 0, flops = 0;
  double ms() const { return mlp1_ms + mlp2_ms; }
};

int run(int argc, char** argv) {
  CLI::App app{"MoE expert GEMM paths by rows per expert, beside the measured ceilings"};
  std::string shape = "gpt-oss-120b", json_path;
  std::vector<int> rows_per_expert = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  std::vector<std::string> routings = {"uniform", "zipf"};
  std::vector<std::string> path_names;
  for (MoePath path : cuda::kMoePaths)
    if (path != MoePath::reference) path_names.push_back(cuda::moe_path_name(path));
  double min_ms = 30;
  uint64_t seed = 1;
  app.add_option("--shape", shape, "expert shapes of")->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b"}))->capture_default_str();
  app.add_option("--rows", rows_per_expert, "rows per expert (the mean, for zipf)")->delimiter(',')->capture_default_str();
  std::vector<int> token_counts;
  app.add_option("--tokens", token_counts,
                 "decode steps of this many tokens instead of --rows (top-k experts each; uniform: all distinct while "
                 "tokens x k <= experts, e.g. 1 token = a batch-1 decode step's 4 experts of 1 row)")
      ->delimiter(',');
  app.add_option("--routing", routings, "uniform and/or zipf")->delimiter(',')->check(CLI::IsMember({"uniform", "zipf"}))->capture_default_str();
  app.add_option("--paths", path_names, "MoE paths (moe_plan.h names)")->delimiter(',')->capture_default_str();
  app.add_option("--min-ms", min_ms, "time to fill with repetitions per measurement")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", seed, "random data and routing")->capture_default_str();
  std::vector<std::string> mixed_texts;
  app.add_option("--mixed-bounds", mixed_texts,
                 "decode-mma-mixed's N8:N16 bounds to run it with (each its own row, named decode-mma-mixed-N8-N16; "
                 "default: the built-in bounds)")->delimiter(',');
  std::vector<int> split_maxes;
  app.add_option("--split-max", split_maxes,
                 "prefill-wgmma-split's bound (an expert's last rows, at most this many, go to 32-row tiles; 0-127) to "
                 "run it with (each its own row, named prefill-wgmma-split-N; default: the built-in bound)")
      ->delimiter(',')
      ->check(CLI::Range(0, cuda::kMoePrefillTileRows - 1));
  std::vector<int> hot_mins;
  app.add_option("--hot-min", hot_mins,
                 "prefill-wgmma-hot's rows that make an expert hot, to run it with (each its own row, named "
                 "prefill-wgmma-hot-N; default: the built-in 1,024)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  int hot_slots = cuda::kMoeHotSlotsDefault;
  app.add_option("--hot-slots", hot_slots, "prefill-wgmma-hot's scratch: how many hot experts' weights it holds")
      ->check(CLI::Range(1, cuda::kMoeHotMaxSlots))
      ->capture_default_str();
  app.add_option("--json", json_path, "write the results as JSON to this file");
  std::string activation_dtype = "bf16";
  app.add_option("--activation-dtype", activation_dtype, "bf16, or fp8 (the decode_mma paths and the prefill_wgmma ones: plain, split, hot)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const bool fp8 = activation_dtype == "fp8";
  // Each run of a path: the path, its mixed bounds (decode-mma-mixed only) and its row's name.
  struct Run {
    MoePath path;
    cuda::MoeMixedBounds mixed;
    std::string name;
    int hot_min = cuda::kMoeHotMinRowsDefault;
  };
  std::vector<Run> paths;
  for (const std::string& name : path_names) {
    const MoePath path = cuda::parse_moe_path(name);
    MOESERVE_CHECK(!fp8 || cuda::moe_path_takes_fp8(path), "--activation-dtype fp8: {} takes bf16 only (the "
                   "decode-mma paths and prefill-wgmma, -split and -hot take fp8)", name);
    if (path == MoePath::prefill_wgmma_hot && !hot_mins.empty()) {
      for (int hot_min : hot_mins) paths.push_back({path, {}, fmt::format("{}-{}", name, hot_min), hot_min});
      continue;
    }
    if (path == MoePath::prefill_wgmma_split && !split_maxes.empty()) {
      for (int split_max : split_maxes) {
        cuda::MoeMixedBounds b;
        b.split_max = split_max;
        paths.push_back({path, b, fmt::format("{}-{}", name, split_max)});
      }
      continue;
    }
    if (path != MoePath::decode_mma_mixed || mixed_texts.empty()) {
      paths.push_back({path, {}, name});
      continue;
    }
    for (const std::string& text : mixed_texts) {
      const cuda::MoeMixedBounds b = cuda::parse_moe_mixed_bounds(text);
      paths.push_back({path, b, fmt::format("{}-{}-{}", name, b.n8_max, b.n16_max)});
    }
  }
  for (int r : rows_per_expert) MOESERVE_CHECK(r > 0 && r <= 4096, "--rows {} (1 to 4096)", r);
  for (int t : token_counts) MOESERVE_CHECK(t > 0 && t <= 131072, "--tokens {} (1 to 131,072)", t);

  TinyModelOptions tiny;
  tiny.shape = shape;
  const ModelConfig c = tiny_model_config(tiny);
  const int E = c.num_experts, k = c.experts_per_token, H = c.hidden_size, I = c.intermediate_size;
  cudaDeviceProp prop{};
  MOESERVE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  fmt::print("{} ({} SMs); {} experts: {} x {} then {} x {} MXFP4, top-{}\n", prop.name, prop.multiProcessorCount, E,
             2 * I, H, H, I, k);
  const bench_cuda::Ceilings ceilings = bench_cuda::measure_ceilings();
  fmt::print("ceilings: copy {:.2f} TB/s (read + write), cuBLASLt bf16 {:.0f} TFLOP/s\n",
             ceilings.copy_bytes_per_s / 1e12, ceilings.bf16_flops_per_s / 1e12);
  const Experts w1(E, 2 * I, H, 5.0, seed * 16), w2(E, H, I, 0.2, seed * 16 + 8);
  std::mt19937 rng(static_cast<uint32_t>(seed));

  // Each measured point: its tokens and the rows per expert it is labelled by (0: a --tokens point).
  std::vector<std::pair<int, int>> points;  // (tokens, rows per expert)
  if (token_counts.empty())
    for (int r : rows_per_expert) points.emplace_back(E * r / k, r);
  else
    for (int t : token_counts) points.emplace_back(t, 0);
  const auto label = [](int T, int r) { return r > 0 ? fmt::format("{}", r) : fmt::format("{} tokens", T); };

  std::vector<Result> results;
  fmt::print("\n| path | routing | rows/expert | experts touched | mlp1 us | mlp2 us | GB/s | of copy | TFLOP/s | "
             "of bf16 | mlp1 error | mlp2 error |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& routing : routings)
    for (const auto& [T, r] : points) {
      Step step(make_routing(routing, E, k, T, rng), T, k, E);
      const int rows = step.rows();
      DeviceBuffer x(static_cast<size_t>(T) * H * 2), act(static_cast<size_t>(rows) * I * 2),
          y(static_cast<size_t>(rows) * H * 4), x_q(fp8 ? static_cast<size_t>(T) * H : 0),
          act_q(fp8 ? static_cast<size_t>(rows) * I : 0), x_scale(fp8 ? T * 4 : 0), act_scale(fp8 ? rows * 4 : 0);
      cuda::launch_fill_uniform(nullptr, cuda::Precision::bf16, x.get(), int64_t{T} * H, seed * 16 + 12 + T, 0.0f, 1.0f);
      const double bytes = step.touched() * (w1.expert_bytes() + w2.expert_bytes()) +
                           (static_cast<double>(T) * H * 2 + 2.0 * rows * I * 2 + static_cast<double>(rows) * H * 4);
      const double flops = 2.0 * rows * (2.0 * I * H + static_cast<double>(H) * I);
      // prefill-wgmma-hot's scratch, for the larger projection (the two run one after the other).
      const bool any_hot = std::any_of(paths.begin(), paths.end(), [](const Run& run) { return run.path == MoePath::prefill_wgmma_hot; });
      DeviceBuffer hot_tiles(any_hot ? static_cast<size_t>(std::max(cuda::moe_hot_bytes(hot_slots, 2 * I, H, fp8),
                                                                    cuda::moe_hot_bytes(hot_slots, H, I, fp8)))
                                     : 0);
      for (const Run& run : paths) {
        const MoePath path = run.path;
        Result res;
        res.path = run.name;
        res.routing = routing;
        res.rows_per_expert = r;
        res.tokens = T;
        res.touched = step.touched();
        Projections p = projections(c, w1, w2, step.group(cuda::moe_rows_per_tile(path), run.mixed), rows, x.get(), act.get(), y.get());
        for (cuda::MoeGemmParams* q : {&p.mlp1, &p.mlp2}) {
          q->hot.tiles = hot_tiles.as<uint8_t>();
          q->hot.slots = hot_slots;
          q->hot.min_rows = run.hot_min;
        }
        if (fp8) {
          p.fp8 = true;
          p.tokens = T;
          p.x_q = x_q.as<uint8_t>();
          p.act_q = act_q.as<uint8_t>();
          p.x_scale = x_scale.as<float>();
          p.act_scale = act_scale.as<float>();
          p.mlp1.x_fp8 = p.x_q;
          p.mlp1.x_scale = p.x_scale;
          p.mlp2.x_fp8 = p.act_q;
          p.mlp2.x_scale = p.act_scale;
        }
        launch_mlp1(p, path);
        launch_mlp2(p, path);
        std::tie(res.mlp1_error, res.mlp2_error) = check_rows(p, rng);
        res.ok = fp8 ? res.mlp1_error.relative <= 0.1 && res.mlp2_error.relative <= 0.1
                     : res.mlp1_error.relative <= 4e-3 && res.mlp2_error.relative <= 1e-4;
        if (res.ok) {
          std::tie(res.mlp1_ms, res.mlp2_ms) = time_projections(p, path, min_ms);
          res.bytes = bytes;
          res.flops = flops;
          fmt::print("| {} | {} | {} | {} | {:.1f} | {:.1f} | {:.0f} | {:.0f}% | {:.1f} | {:.0f}% | {:.1e} | {:.1e} |\n",
                     res.path, routing, label(T, r), res.touched, res.mlp1_ms * 1e3, res.mlp2_ms * 1e3, bytes / res.ms() / 1e6,
                     100 * bytes / res.ms() * 1e3 / ceilings.copy_bytes_per_s, flops / res.ms() / 1e9,
                     100 * flops / res.ms() * 1e3 / ceilings.bf16_flops_per_s, res.mlp1_error.relative,
                     res.mlp2_error.relative);
        } else {
          fmt::print("| {} | {} | {} | {} | WRONG (errors {:.2e} / {:.2e}, max {:.2e} / {:.2e}): no figures |||||||\n",
                     res.path, routing, label(T, r), res.touched, res.mlp1_error.relative, res.mlp2_error.relative,
                     res.mlp1_error.max_abs, res.mlp2_error.max_abs);
        }
        results.push_back(res);
      }
    }

  // The short table: the fastest correct path at each point, and the one the runner would choose.
  fmt::print("\n| routing | rows/expert | fastest path | us | GB/s (of copy) | TFLOP/s (of bf16) | runner's path | its us |\n"
             "|---|---|---|---|---|---|---|---|\n");
  bool all_ok = true;
  for (const std::string& routing : routings)
    for (const auto& [T, r] : points) {
      const Result* best = nullptr;
      const Result* chosen = nullptr;
      const std::string runner_path = cuda::moe_path_name(cuda::choose_moe_path(true, T, k, E, {}, fp8));
      for (const Result& res : results) {
        if (res.routing != routing || res.tokens != T) continue;
        all_ok = all_ok && res.ok;
        if (res.ok && (best == nullptr || res.ms() < best->ms())) best = &res;
        if (res.path == runner_path) chosen = &res;
      }
      if (best == nullptr) continue;
      fmt::print("| {} | {} | {} | {:.1f} | {:.0f} ({:.0f}%) | {:.1f} ({:.0f}%) | {} | {} |\n", routing, label(T, r), best->path,
                 best->ms() * 1e3, best->bytes / best->ms() / 1e6,
                 100 * best->bytes / best->ms() * 1e3 / ceilings.copy_bytes_per_s, best->flops / best->ms() / 1e9,
                 100 * best->flops / best->ms() * 1e3 / ceilings.bf16_flops_per_s, runner_path,
                 chosen != nullptr && chosen->ok ? fmt::format("{:.1f}", chosen->ms() * 1e3) : std::string("-"));
    }

  if (!json_path.empty()) {
    nlohmann::json json = {{"gpu", prop.name},
                           {"shape", shape},
                           {"copy_tb_per_s", ceilings.copy_bytes_per_s / 1e12},
                           {"bf16_tflop_per_s", ceilings.bf16_flops_per_s / 1e12},
                           {"results", nlohmann::json::array()}};
    for (const Result& res : results)
      json["results"].push_back({{"path", res.path},
                                 {"routing", res.routing},
                                 {"rows_per_expert", res.rows_per_expert},
                                 {"tokens", res.tokens},
                                 {"experts_touched", res.touched},
                                 {"correct", res.ok},
                                 {"mlp1_relative_error", res.mlp1_error.relative},
                                 {"mlp2_relative_error", res.mlp2_error.relative},
                                 {"mlp1_max_error", res.mlp1_error.max_abs},
                                 {"mlp2_max_error", res.mlp2_error.max_abs},
                                 {"mlp1_us", res.mlp1_ms * 1e3},
                                 {"mlp2_us", res.mlp2_ms * 1e3},
                                 {"gb_per_s", res.ok ? res.bytes / res.ms() / 1e6 : 0.0},
                                 {"tflop_per_s", res.ok ? res.flops / res.ms() / 1e9 : 0.0}});
    write_text_file(json_path, json.dump(2));
  }
  return all_ok ? 0 : 2;  // a wrong path fails the run
}

}  // namespace
}  // namespace moeserve

int main(int argc, char** argv) { return moeserve::bench_cuda::bench_main("moe_bench", moeserve::run, argc, argv); }
