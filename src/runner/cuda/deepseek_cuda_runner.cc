#include "runner/cuda/deepseek_cuda_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "model/deepseek_v3/make_tiny.h"
#include "runner/cuda/cuda_check.h"
#include "runner/cuda/dtype_options.h"
#include "runner/cuda/fp8_gemm.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

// q_a_layernorm and kv_a_layernorm keep RMSNorm's default epsilon in both references (cpu::MlaAttention's
// kLatentNormEps, runner/cpu/mla.cc).
constexpr float kLatentNormEps = 1e-6f;
// The absorbed attention's per-step scratch (q~, q_pe, o~ and launch_mla_decode's partials): a step whose tokens
// need more runs its attention in chunks of tokens. R1 at 4k context takes ~17 MB a token (128 heads x 64 splits
// of 514 partial floats), so 1 GiB is ~60 prefill tokens a chunk; decode batches of 64 at 2k fit in one.
constexpr size_t kAttentionScratchBytes = size_t{1} << 30;
// The expanded-form prefill's scratch (mla_prefill_scratch_bytes: its sequences' context rows through kv_b, 65,664
// bytes a row at DeepSeek-V3's widths): a step's sequences take the expanded form in order while their rows fit, the
// others stay absorbed. 1 GiB as kAttentionScratchBytes: 16,352 rows at V3's widths, so that a prompt's chunks (the
// engine's 8,192 tokens a step on a GPU) take the expanded form up to position 16,351.
constexpr size_t kPrefillScratchBytes = size_t{1} << 30;
// cuBLASLt's FP8 activation scales are token-contiguous columns, 16-byte aligned only for a multiple of 4 tokens
// (fp8_block_layout.h, fp8_gemm_cublaslt_refusal): the FP8 projections' inputs are padded to it.
constexpr int kFp8RowMultiple = 4;

// StepMetadata's attention work lists are GPT-OSS's (prefill tiles, decode groups sized by query heads per KV
// head, 16 / 128 = 0 tokens for R1's MQA over one latent); the MLA kernels read neither, so every sequence goes to
// the tile list, whose size does not depend on the heads.
constexpr int kEverySequenceInTiles = 1;

// CUDA graphs are on unless turned off (CudaRunnerOptions::deepseek_graphs, MOESERVE_DEEPSEEK_GRAPHS "off"): their
// tests (deepseek_graph_test.cc's graphed steps bit-equal to direct ones, deepseek_mtp_test.cc's graphed chains and
// greedy speculation) passed on an H200 on 2026-12-07, where graphed decode layers ran ~5% faster than launched ones
// at batch 1 (deepseek_layer_bench; docs/PERF.md).
constexpr bool kDeepseekGraphsDefault = true;
// The expanded-form prefill is on unless turned off (CudaRunnerOptions::deepseek_mla_prefill,
// MOESERVE_DEEPSEEK_MLA_PREFILL "absorbed"): the runner's tests with it passed on an H200 and an H100 (2026-12-07),
// and on the H100 (binaries of 09cef2e, v2 experts, deepseek_layer_bench) it took an MoE layer's prefill of 1 x 4k
// from 76.2 to 20.6 ms and of 16 x 1k from 150.3 to 57.4 ms, decode unchanged (docs/PERF.md).
constexpr bool kExpandedPrefillDefault = true;
// The smallest context bucket of a graph-shaped step: one split of launch_mla_decode's largest (kMlaMaxSplitKeys),
// so short contexts share one graph a bucket. Buckets double from there: a graph serves contexts up to its bucket,
// launching at most twice the splits the longest needs (the extra blocks return at once) and holding at most twice
// its partials, and a sequence crosses into a new bucket log2(context / 64) times.
constexpr int kMinGraphContext = kMlaMaxSplitKeys;

int padded(int tokens) { return (tokens + kFp8RowMultiple - 1) / kFp8RowMultiple * kFp8RowMultiple; }

// The longest context a sequence of the batch reaches (1 for an empty batch).
int longest_context(const ForwardBatch& batch) {
  int longest = 1;
  for (const SequenceStep& step : batch.sequences)
    longest = std::max(longest, step.start_position + static_cast<int>(step.tokens.size()));
  return longest;
}

// A two-way switch of this runner: CudaRunnerOptions' field `option` (named `field`), else the environment variable
// `env`; empty when neither is set, else `yes` or `no` (anything else fails, naming where it came from).
std::string switch_value(const std::string& option, const char* field, const char* env, const char* yes,
                         const char* no) {
  std::string value = option, source = std::string("CudaRunnerOptions::") + field;
  if (value.empty()) {
    const char* set = std::getenv(env);
    value = set != nullptr ? set : "";
    source = env;
  }
  MOESERVE_CHECK(value.empty() || value == yes || value == no, "{} \"{}\": {} or {}", source, value, yes, no);
  return value;
}

// Whether the runner's steps are graphed: options.cuda_graphs and its deepseek_graphs, else MOESERVE_DEEPSEEK_GRAPHS
// ("on" or "off"), else kDeepseekGraphsDefault.
bool graphs_on(const CudaRunnerOptions& options) {
  const std::string value =
      switch_value(options.deepseek_graphs, "deepseek_graphs", "MOESERVE_DEEPSEEK_GRAPHS", "on", "off");
  return options.cuda_graphs && (value.empty() ? kDeepseekGraphsDefault : value == "on");
}

// Whether prefill may take the expanded form: options.deepseek_mla_prefill, else MOESERVE_DEEPSEEK_MLA_PREFILL
// ("expanded" or "absorbed"), else kExpandedPrefillDefault.
bool expanded_prefill_asked(const CudaRunnerOptions& options) {
  const std::string value = switch_value(options.deepseek_mla_prefill, "deepseek_mla_prefill",
                                         "MOESERVE_DEEPSEEK_MLA_PREFILL", "expanded", "absorbed");
  return value.empty() ? kExpandedPrefillDefault : value == "expanded";
}

// The routed experts' kernel: the option, else MOESERVE_DEEPSEEK_EXPERTS, else kDeepseekExpertsDefault, v2
// (deepseek_kernels.h).
DeepseekExpertsVersion experts_version_of(const CudaRunnerOptions& options) {
  return options.deepseek_experts.empty()
             ? deepseek_experts_version()
             : parse_deepseek_experts_version(options.deepseek_experts, "CudaRunnerOptions::deepseek_experts");
}

// What the factories check before any device is touched: the options this runner takes.
void check_options(const CudaRunnerOptions& options) {
  MOESERVE_CHECK(options.tensor_parallel_size == 1 && !options.expert_parallel,
                 "DeepSeek-V3 on the CUDA runner runs on one GPU so far (no --tensor-parallel-size or "
                 "--enable-expert-parallel)");
  MOESERVE_CHECK(options.activation_dtype == "auto" || options.activation_dtype == "bf16",
                 "--activation-dtype {}: the DeepSeek CUDA runner's FP8 projections quantise their inputs already "
                 "(DeepSeek's act_quant); use auto",
                 options.activation_dtype);
  parse_kv_dtype(options.kv_cache_dtype, parse_precision(options.precision));
  experts_version_of(options);
  graphs_on(options);
  expanded_prefill_asked(options);
}

MlaKvbView kv_b_view(const DeviceMatrix& kv_b, const deepseek_v3::Config& c) {
  const MlaWeightType type = kv_b.type == WeightType::fp8_block ? MlaWeightType::fp8_block
                             : kv_b.type == WeightType::bf16   ? MlaWeightType::bf16
                                                               : MlaWeightType::f32;
  return {kv_b.values, kv_b.scales, type, c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank};
}

// Copies `words` into `buffer` on `stream`, growing it by doubling first (at least 4 KB); true when it was
// reallocated. From pageable memory: the copy has taken the words when it returns.
bool upload_words(cudaStream_t stream, const std::vector<int32_t>& words, DeviceBuffer& buffer) {
  const size_t bytes = words.size() * sizeof(int32_t);
  const bool moved = bytes > buffer.bytes() && buffer.grow(std::max({bytes, 2 * buffer.bytes(), size_t{4096}}));
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(buffer.get(), words.data(), bytes, cudaMemcpyHostToDevice, stream));
  return moved;
}

// Tokens [t0, t0 + n) of a step, as a step of their own for the kernels that index tokens only (MLA absorb,
// attention): the per-token arrays start at t0; the per-sequence ones are the step's.
StepView token_range(StepView step, int t0, int n) {
  step.num_tokens = n;
  step.token_ids += t0;
  step.positions += t0;
  step.token_seq += t0;
  return step;
}

}  // namespace

DeepseekCudaRunner::DeepseekCudaRunner(deepseek_v3::Config config, DeepseekDeviceWeights weights,
                                       const CudaRunnerOptions& options)
    : config_(std::move(config)),
      engine_config_(config_.engine_view()),
      weights_(std::move(weights)),
      precision_(parse_precision(options.precision)),
      kv_dtype_(parse_kv_dtype(options.kv_cache_dtype, precision_)),
      experts_version_(experts_version_of(options)),
      groups_(kv_groups_of(engine_config_)),
      expanded_prefill_asked_(expanded_prefill_asked(options)),
      graphs_on_(graphs_on(options)) {
  const deepseek_v3::Config& c = config_;
  MOESERVE_CHECK(weights_.precision == precision_, "DeepSeek CUDA runner: weights made for another precision");
  MOESERVE_CHECK(c.n_routed_experts <= kMaxExperts && c.num_experts_per_tok <= kMaxTopK && c.n_group <= kMaxNoauxGroups,
                 "DeepSeek CUDA runner: {} experts in {} groups, top-{} (at most {} experts, {} groups, top-{})",
                 c.n_routed_experts, c.n_group, c.num_experts_per_tok, kMaxExperts, kMaxNoauxGroups, kMaxTopK);
  MOESERVE_CHECK(c.hidden_size % 4 == 0 && c.q_lora_rank % 4 == 0,
                 "DeepSeek CUDA runner: hidden_size {} and q_lora_rank {} must be multiples of 4 (RMSNorm's float4s)",
                 c.hidden_size, c.q_lora_rank);
  MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, options.device));
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  inv_freq_ = to_device(c.rope_inverse_frequencies());
}

DeepseekCudaRunner::~DeepseekCudaRunner() {
  graphs_.clear();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

size_t DeepseekCudaRunner::kv_block_bytes(int block_size) const {
  return groups_.block_bytes(block_size, kv_element_bytes(kv_dtype_));  // [layer][token][latent, k_pe]
}

size_t DeepseekCudaRunner::device_memory_free() const {
  return device_memory().free + kv_.bytes();  // allocate_kv_cache() gives the current pool back first
}

size_t DeepseekCudaRunner::device_memory_total() const { return device_memory().total; }

void DeepseekCudaRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  MOESERVE_CHECK(layout.block_size > 0 && layout.num_blocks > 0, "KV cache needs a positive block size and count");
  buffers_moved();
  kv_ = DeviceBuffer();  // free first: the pool is most of the memory left
  kv_ = DeviceBuffer(kv_block_bytes(layout.block_size) * (layout.num_blocks + 1));
  layout_ = layout;
  padding_block_ = static_cast<int32_t>(layout.num_blocks);
  expanded_prefill_ = expanded_prefill_possible(layout.block_size);
}

bool DeepseekCudaRunner::expanded_prefill_possible(int block_size) const {
  if (!expanded_prefill_asked_ || precision_ != Precision::bf16) return false;
  const MlaCacheView pool{nullptr, {config_.kv_lora_rank, config_.qk_rope_head_dim, block_size, 1}, kv_dtype_};
  return std::all_of(weights_.layers.begin(), weights_.layers.end(), [&](const DeepseekDeviceLayer& w) {
    return mla_prefill_shape_error(kv_b_view(w.kv_b, config_), pool).empty();
  });
}

void DeepseekCudaRunner::buffers_moved() {
  graphs_.clear();
  ++buffers_generation_;
}

int DeepseekCudaRunner::graph_context(int context) const {
  int bucket = kMinGraphContext;
  while (bucket < context) bucket *= 2;
  return std::max(context, static_cast<int>(std::min<int64_t>(bucket, config_.max_position_embeddings)));
}

MlaCacheView DeepseekCudaRunner::cache_view() const {
  const MlaCacheShape shape{config_.kv_lora_rank, config_.qk_rope_head_dim, layout_.block_size, config_.num_layers};
  return {kv_.get(), shape, kv_dtype_};
}

DeepseekCudaRunner::Plan DeepseekCudaRunner::plan_for(const StepMetadata& meta, int context) const {
  const deepseek_v3::Config& c = config_;
  Plan plan;
  plan.tokens = meta.num_tokens();
  plan.padded_tokens = padded(plan.tokens);
  plan.rows = static_cast<int>(meta.rows().size());
  int64_t token_bytes = static_cast<int64_t>(c.num_heads) * (2 * c.kv_lora_rank + c.qk_rope_head_dim) * 4;
  if (precision_ == Precision::bf16) {
    plan.context = context;
    plan.split_keys = mla_decode_split_keys(plan.tokens, context, multiprocessors_);
    plan.max_splits = mla_decode_splits(context - 1, plan.split_keys);
    token_bytes += static_cast<int64_t>(mla_decode_partial_floats(1, c.num_heads, c.kv_lora_rank, plan.max_splits)) * 4;
  }
  plan.attention_chunk = static_cast<int>(std::clamp<int64_t>(
      static_cast<int64_t>(kAttentionScratchBytes) / token_bytes, 1, std::max(plan.tokens, 1)));
  return plan;
}

void DeepseekCudaRunner::ensure_capacity(const Plan& plan, size_t capture_layers) {
  const deepseek_v3::Config& c = config_;
  const size_t T = plan.tokens, P = plan.padded_tokens, A = element_bytes(precision_), H = c.hidden_size,
               heads = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, E = c.n_routed_experts,
               k = c.num_experts_per_tok, chunk = plan.attention_chunk, rows = plan.rows;
  const size_t moe_I = c.moe_intermediate_size, shared_I = moe_I * std::max(c.n_shared_experts, 0);
  const size_t mlp_I = std::max<size_t>(c.intermediate_size, shared_I);
  // The widest input of an FP8 projection, the MTP head's eh_proj (2 hidden) included when the model has one.
  const size_t mtp_input = c.num_nextn_predict_layers > 0 ? 2 * H : 0;
  const size_t widest_input =
      std::max({H, static_cast<size_t>(c.q_lora_rank), heads * c.v_head_dim, mlp_I, mtp_input});
  bool moved = moe_.grow(plan.tokens, c.num_experts_per_tok, c.n_routed_experts);
  auto grow = [&](DeviceBuffer& buffer, size_t bytes) { moved |= buffer.grow(std::max<size_t>(bytes, 16)); };
  // An FP8 projection's input: its padding rows must hold finite values (zeros until a step writes them).
  auto grow_input = [&](DeviceBuffer& buffer, size_t bytes) {
    if (!buffer.grow(std::max<size_t>(bytes, 16))) return;
    moved = true;
    MOESERVE_CUDA_CHECK(cudaMemsetAsync(buffer.get(), 0, buffer.bytes(), stream_));
  };
  grow(x_, T * H * 4);
  grow_input(normed_, P * H * A);
  grow(q_a_, P * c.q_lora_rank * 4);
  grow_input(q_a_normed_, P * c.q_lora_rank * A);
  grow(q_, P * heads * c.qk_head_dim() * 4);
  grow(kv_a_, P * c.kv_a_rows() * 4);
  grow(q_latent_, chunk * heads * L * 4);
  grow(q_rope_, chunk * heads * R * 4);
  grow(latent_out_, chunk * heads * L * 4);
  grow(partial_, precision_ == Precision::bf16 ? mla_decode_partial_floats(chunk, heads, L, plan.max_splits) * 4 : 0);
  grow_input(attn_, P * heads * c.v_head_dim * A);
  grow(proj_, P * H * 4);
  grow(mlp_gate_, P * mlp_I * 4);
  grow(mlp_up_, P * mlp_I * 4);
  grow_input(mlp_act_, P * mlp_I * A);
  grow(ffn_out_, P * H * 4);
  grow(shared_out_, P * H * 4);
  grow(router_logits_, T * E * 4);
  grow(experts_, T * k * 4);
  grow(expert_weights_, T * k * 4);
  grow(moe_act_, T * k * moe_I * A);
  grow(moe_y_, T * k * H * 4);
  // act_quant's output: the FP8 projections' inputs (P rows of at most widest_input) and, on version 2, the routed
  // experts' (gate/up: T rows of H, within the former; down: T k rows of moe_I). DeepSeek-R1: 18,432 B + 576 B of
  // scales a padded token (the dense MLP's down, input 18,432), which covers down's 8 x 2,048 B + 512 B; the tiny
  // model: 320 B + 12 B, under down's 4 x 96 B + 16 B. Version 2 launches one grid row per 128 rows of an expert, at
  // most T k / 128 + E, within its 65,535 for any step under ~1 M tokens (R1's k 8, E 256).
  const size_t routed_rows = experts_version_ == DeepseekExpertsVersion::v2 ? T * k : 0;
  grow(fp8_values_, std::max(P * widest_input, routed_rows * moe_I));
  grow(fp8_scales_, 4 * static_cast<size_t>(std::max(fp8_activation_scale_count(P, widest_input),
                                                     fp8_activation_scale_count(routed_rows, moe_I))));
  grow(logits_in_, rows * H * A);
  grow(logits_, rows * c.vocab_size * 4);
  grow(sampled_, rows * 4);
  grow(captured_, capture_layers * T * H * 4);
  if (moved) buffers_moved();
}

void DeepseekCudaRunner::project(const void* x, int rows, const DeviceMatrix& w, float* y) {
  if (w.type != WeightType::fp8_block) {
    MOESERVE_CHECK(w.type == weight_type_of(precision_), "a dense weight of another type than the runner's precision");
    blas_.linear(stream_, precision_, x, rows, w.values, w.rows, w.cols, nullptr, y);
    return;
  }
  if (precision_ == Precision::bf16) {
    fp8_block_linear(stream_, blas_, Precision::bf16, x, padded(rows), w.fp8_view(), fp8_scratch(), Precision::f32, y);
    return;
  }
  DeepseekExpertParams p;  // one matrix over the rows in order: W8A32, as the CPU reference
  p.w = w;
  p.x = x;
  p.x_type = Precision::f32;
  p.out = y;
  p.rows = rows;
  launch_deepseek_experts(stream_, p, experts_version_);  // version 1 under either: a dense f32 projection
}

Fp8Activations DeepseekCudaRunner::fp8_scratch() const {
  return {fp8_values_.as<uint8_t>(), fp8_scales_.as<float>()};
}

void DeepseekCudaRunner::mlp(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down,
                             const Plan& plan, float* out) {
  const int T = plan.tokens;
  timer_.mark(stream_, KernelClass::dense_mlp);
  project(normed_.get(), T, gate, mlp_gate_.as<float>());
  project(normed_.get(), T, up, mlp_up_.as<float>());
  launch_silu_mul(stream_, mlp_gate_.as<float>(), mlp_up_.as<float>(), static_cast<int64_t>(T) * gate.rows, precision_,
                  mlp_act_.get());
  project(mlp_act_.get(), T, down, out);
}

void DeepseekCudaRunner::attention(const DeepseekDeviceLayer& w, const MlaCacheView& cache, int layer,
                                   const Plan& plan, const StepView& step) {
  const deepseek_v3::Config& c = config_;
  const int T = plan.tokens;
  timer_.mark(stream_, KernelClass::qkv_projection);
  if (c.q_lora_rank > 0) {
    project(normed_.get(), T, w.q_a, q_a_.as<float>());
    launch_add_rms_norm(stream_, precision_, q_a_.as<float>(), nullptr, nullptr, w.q_a_norm, T, c.q_lora_rank,
                        kLatentNormEps, q_a_normed_.get());
    project(q_a_normed_.get(), T, w.q_b, q_.as<float>());
  } else {
    project(normed_.get(), T, w.q, q_.as<float>());
  }
  project(normed_.get(), T, w.kv_a, kv_a_.as<float>());
  timer_.mark(stream_, KernelClass::rope_kv_write);
  launch_mla_cache_write(stream_,
                         {kv_a_.as<float>(), w.kv_a_norm, kLatentNormEps, inv_freq_.as<float>(),
                          c.rope_attention_factor(), cache, layer, 0, 1.0f},
                         step);
  // The expanded form's sequences read their latents, this step's included, from the cache written above; the
  // absorbed form takes the runs of tokens between them.
  const MlaKvbView kv_b = kv_b_view(w.kv_b, c);
  if (!plan.expanded.empty()) {
    const MlaPrefillParams prefill{q_.as<float>(), inv_freq_.as<float>(), c.rope_attention_factor(), c.softmax_scale(),
                                   kv_b, cache, layer, 0, 1.0f, prefill_scratch_.get(), attn_.get(), precision_};
    timer_.mark(stream_, KernelClass::latent_expansion);
    launch_mla_prefill_expand(stream_, prefill, plan.expanded_work, step);
    timer_.mark(stream_, KernelClass::attention_prefill);
    launch_mla_prefill_attention(stream_, prefill, plan.expanded_work);
  }
  timer_.mark(stream_, KernelClass::attention_decode);
  int first = 0;
  for (const MlaPrefillSequence& s : plan.expanded) {
    absorbed_attention(kv_b, cache, layer, plan, step, first, s.q_start);
    first = s.q_start + s.q_len;
  }
  absorbed_attention(kv_b, cache, layer, plan, step, first, T);
  timer_.mark(stream_, KernelClass::output_projection);
  project(attn_.get(), T, w.o, proj_.as<float>());
}

void DeepseekCudaRunner::absorbed_attention(const MlaKvbView& kv_b, const MlaCacheView& cache, int layer,
                                            const Plan& plan, const StepView& step, int first, int end) {
  const deepseek_v3::Config& c = config_;
  const int heads = c.num_heads;
  const MlaDecodeParams decode{q_latent_.as<float>(), q_rope_.as<float>(), latent_out_.as<float>(), c.softmax_scale(),
                               heads, cache, layer, 0, 1.0f};
  for (int t0 = first; t0 < end; t0 += plan.attention_chunk) {
    const int n = std::min(plan.attention_chunk, end - t0);
    const StepView tokens = token_range(step, t0, n);
    launch_mla_absorb(stream_,
                      {q_.as<float>() + static_cast<int64_t>(t0) * heads * c.qk_head_dim(), c.qk_rope_head_dim,
                       inv_freq_.as<float>(), c.rope_attention_factor(), kv_b, q_latent_.as<float>(),
                       q_rope_.as<float>()},
                      tokens);
    if (precision_ == Precision::f32)
      launch_mla_attention_f32(stream_, decode, tokens);
    else
      launch_mla_decode(stream_, decode, tokens, {plan.split_keys, plan.max_splits, partial_.as<float>()});
    void* out = static_cast<uint8_t*>(attn_.get()) +
                static_cast<int64_t>(t0) * heads * c.v_head_dim * element_bytes(precision_);
    launch_mla_unabsorb(stream_, precision_, {latent_out_.as<float>(), kv_b, out}, n);
  }
}

void DeepseekCudaRunner::feed_forward(const DeepseekDeviceLayer& w, const Plan& plan) {
  const deepseek_v3::Config& c = config_;
  if (!w.moe) return mlp(w.gate, w.up, w.down, plan, ffn_out_.as<float>());
  const int T = plan.tokens, k = c.num_experts_per_tok, H = c.hidden_size;
  const MoeRouting routing = moe_.routing();
  // The router's logits in fp32 (transformers casts both sides to float32; bf16 inputs on the bf16 path).
  timer_.mark(stream_, KernelClass::router);
  project(normed_.get(), T, w.router, router_logits_.as<float>());
  const NoauxTcRouting noaux{c.n_routed_experts, c.n_group,      c.topk_group, k,
                             c.norm_topk_prob,   static_cast<float>(c.routed_scaling_factor)};
  launch_route_noaux_tc(stream_, router_logits_.as<float>(), w.router_bias, T, noaux, experts_.as<int32_t>(),
                        expert_weights_.as<float>(), routing.expert_counts);
  timer_.mark(stream_, KernelClass::grouping);
  launch_group_by_expert(stream_, experts_.as<int32_t>(), T, k, kDeepseekExpertTileRows, routing);

  DeepseekExpertParams gate_up;
  gate_up.w = w.gate;
  gate_up.up = w.up;
  gate_up.x = normed_.get();
  gate_up.x_type = precision_;
  gate_up.x_row = routing.row_token;
  gate_up.out = moe_act_.get();
  gate_up.out_type = precision_;
  gate_up.rows = T * k;
  gate_up.routing = routing;
  gate_up.x_fp8 = fp8_scratch();  // version 2 quantises x's T rows there (ensure_capacity sizes it)
  gate_up.x_rows = T;
  timer_.mark(stream_, KernelClass::expert_mlp1);
  launch_deepseek_experts(stream_, gate_up, experts_version_);
  DeepseekExpertParams down = gate_up;
  down.w = w.down;
  down.up = {};
  down.x = moe_act_.get();
  down.x_row = nullptr;
  down.x_rows = T * k;  // one row per grouped row: the gate/up output
  down.out = moe_y_.get();
  down.out_type = Precision::f32;
  timer_.mark(stream_, KernelClass::expert_mlp2);
  launch_deepseek_experts(stream_, down, experts_version_);

  if (w.has_shared) mlp(w.shared_gate, w.shared_up, w.shared_down, plan, shared_out_.as<float>());
  timer_.mark(stream_, KernelClass::expert_combine);
  const ExpertCombine combine{moe_y_.as<float>(), routing.slot_row, expert_weights_.as<float>(), k};
  launch_deepseek_moe_combine(stream_, combine, w.has_shared ? shared_out_.as<float>() : nullptr, T, H,
                              ffn_out_.as<float>());
}

void DeepseekCudaRunner::attention_and_ffn(const DeepseekDeviceLayer& w, const MlaCacheView& cache, int layer,
                                           const Plan& plan, const StepView& step, float* x) {
  attention(w, cache, layer, plan, step);
  timer_.mark(stream_, KernelClass::norm);
  launch_add_rms_norm(stream_, precision_, x, proj_.as<float>(), nullptr, w.post_attention_norm, plan.tokens,
                      config_.hidden_size, static_cast<float>(config_.rms_norm_eps), normed_.get());
  feed_forward(w, plan);
}

void DeepseekCudaRunner::decoder_layer(const DeepseekDeviceLayer& w, const MlaCacheView& cache, int layer,
                                       const Plan& plan, const StepView& step, float* x) {
  timer_.mark(stream_, KernelClass::norm);
  launch_add_rms_norm(stream_, precision_, x, nullptr, nullptr, w.input_norm, plan.tokens, config_.hidden_size,
                      static_cast<float>(config_.rms_norm_eps), normed_.get());
  attention_and_ffn(w, cache, layer, plan, step, x);
}

DeepseekCudaRunner::Plan DeepseekCudaRunner::plan_layer_step(const ForwardBatch& batch, const KvCacheLayout& cache,
                                                             int context, StepMetadata& meta) {
  for (const SequenceStep& step : batch.sequences)
    MOESERVE_CHECK(step.tree_parent.empty() && step.num_logits == 0,
                   "a layer step takes causal runs without logits rows");
  meta.build(batch, engine_config_, groups_, cache, 0, 0, 0, kEverySequenceInTiles);
  Plan plan = plan_for(meta, std::max(context, longest_context(batch)));
  ensure_capacity(plan, 0);
  // A step of its own may take the expanded form, as forward()'s steps that are not graph-shaped; a chain's steps
  // (context > 0) share one plan and its graphs, so every token of theirs stays absorbed.
  if (context == 0 && expanded_prefill_possible(cache.block_size)) plan_expanded_prefill(batch, plan);
  return plan;
}

int DeepseekCudaRunner::fp8_rows(int rows) { return padded(rows); }

void DeepseekCudaRunner::enqueue(const Plan& plan, const std::vector<int>& capture_layers) {
  const deepseek_v3::Config& c = config_;
  const StepView step = meta_.view(meta_device_.as<int32_t>());
  const int T = plan.tokens, H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = x_.as<float>();
  auto capture = [&](int layer) {
    for (size_t j = 0; j < capture_layers.size(); ++j)
      if (capture_layers[j] == layer)
        MOESERVE_CUDA_CHECK(cudaMemcpyAsync(captured_.as<float>() + j * T * H, x, static_cast<size_t>(T) * H * 4,
                                            cudaMemcpyDeviceToDevice, stream_));
  };

  timer_.mark(stream_, KernelClass::embedding);
  launch_embedding(stream_, precision_, weights_.embedding.values, H, step.token_ids, T, x);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const DeepseekDeviceLayer& w = weights_.layers[layer];
    // The previous layer's FFN output joins the residual stream here, fused with this layer's input norm.
    timer_.mark(stream_, KernelClass::norm);
    launch_add_rms_norm(stream_, precision_, x, layer == 0 ? nullptr : ffn_out_.as<float>(), nullptr, w.input_norm, T,
                        H, eps, normed_.get());
    if (layer > 0) capture(layer - 1);
    attention_and_ffn(w, cache_view(), layer, plan, step, x);
  }
  timer_.mark(stream_, KernelClass::norm);
  launch_add_rms_norm(stream_, precision_, x, ffn_out_.as<float>(), nullptr, weights_.final_norm, T, H, eps,
                      normed_.get());
  capture(c.num_layers - 1);
  timer_.mark(stream_, KernelClass::unembedding);
  launch_gather_rows(stream_, precision_, normed_.get(), H, meta_.logits_rows(meta_device_.as<int32_t>()), plan.rows,
                     logits_in_.get());
  project(logits_in_.get(), plan.rows, weights_.lm_head, logits_.as<float>());
  timer_.mark(stream_, KernelClass::sampling);
  launch_argmax(stream_, logits_.as<float>(), plan.rows, c.vocab_size, sampled_.as<int32_t>());
}

void DeepseekCudaRunner::upload_metadata() {
  // Doubling: the block tables grow by a block every block_size positions, and a graph reads the metadata where
  // it was captured.
  if (upload_words(stream_, meta_.host(), meta_device_)) buffers_moved();
}

void DeepseekCudaRunner::plan_expanded_prefill(const ForwardBatch& batch, Plan& plan) {
  const deepseek_v3::Config& c = config_;
  const MlaKvbView widths = kv_b_view(weights_.layers[0].kv_b, c);  // the scratch's size depends on widths alone
  std::vector<MlaPrefillSequence> expanded;
  int64_t rows = 0;
  for (int s = 0, first = 0; s < static_cast<int>(batch.sequences.size()); ++s) {
    const SequenceStep& step = batch.sequences[s];
    const int q_len = static_cast<int>(step.tokens.size()), context = step.start_position + q_len;
    if (mla_prefill_pays(context, q_len, c.kv_lora_rank, c.qk_nope_head_dim, c.v_head_dim) &&
        mla_prefill_scratch_bytes(widths, c.qk_rope_head_dim, rows + context) <= kPrefillScratchBytes) {
      expanded.push_back({s, first, q_len, context});
      rows += context;
    }
    first += q_len;
  }
  if (expanded.empty()) return;
  const MlaPrefillPlan host = mla_prefill_plan(expanded);
  upload_words(stream_, host.words, prefill_words_);
  const size_t scratch = mla_prefill_scratch_bytes(widths, c.qk_rope_head_dim, host.kv_rows);
  if (scratch > prefill_scratch_.bytes())  // doubling within the bound, so that longer prompts seldom reallocate
    prefill_scratch_.grow(std::min(std::max(scratch, 2 * prefill_scratch_.bytes()), kPrefillScratchBytes));
  plan.expanded = std::move(expanded);
  plan.expanded_work = host.view(prefill_words_.as<int32_t>());
}

void DeepseekCudaRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  MOESERVE_CHECK(kv_.get() != nullptr, "forward() before allocate_kv_cache()");
  for (const SequenceStep& step : batch.sequences)
    MOESERVE_CHECK(step.tree_parent.empty(),
                   "the DeepSeek CUDA runner does not verify trees yet (the MLA kernels take causal runs)");
  for (int layer : batch.capture_layers)
    MOESERVE_CHECK(layer >= 0 && layer < config_.num_layers, "capture layer {} of {} layers", layer,
                   config_.num_layers);
  // Graph-shaped steps are padded to their bucket and planned for their context bucket with graphs or without
  // (see the header comment), so that both run the same kernels on the same shapes.
  const int q_len = graph_query_len(batch);
  const int bucket = q_len > 0 ? graph_bucket(static_cast<int>(batch.sequences.size())) : 0;
  const int longest = longest_context(batch);
  const auto started = std::chrono::steady_clock::now();
  meta_.build(batch, engine_config_, groups_, layout_, bucket, q_len, padding_block_, kEverySequenceInTiles);
  Plan plan = plan_for(meta_, bucket > 0 ? graph_context(longest) : longest);
  ensure_capacity(plan, batch.capture_layers.size());
  timer_.mark(stream_, KernelClass::metadata_upload);
  upload_metadata();
  if (bucket == 0 && expanded_prefill_) plan_expanded_prefill(batch, plan);
  if (plan.tokens > 0 && graphs_on_ && bucket > 0 && !timer_.enabled())
    graphs_.run({bucket, q_len, plan.context, batch.capture_layers}, stream_,
                [&] { enqueue(plan, batch.capture_layers); });
  else if (plan.tokens > 0)
    enqueue(plan, batch.capture_layers);

  // The captured layers' rows of the real tokens (graph padding's follow them).
  const int64_t H = config_.hidden_size;
  int64_t real_tokens = 0;
  for (const SequenceStep& step : batch.sequences) real_tokens += static_cast<int64_t>(step.tokens.size());
  output.captured.assign(batch.capture_layers.size(), {});
  for (size_t j = 0; j < output.captured.size(); ++j) {
    output.captured[j].resize(real_tokens * H);
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(output.captured[j].data(), captured_.as<float>() + j * plan.tokens * H,
                                        real_tokens * H * 4, cudaMemcpyDeviceToHost, stream_));
  }
  // Real rows first; graph padding's rows follow and are dropped.
  logits_rows_.finish_step(stream_, meta_.rows(), config_.vocab_size, logits_.as<float>(), sampled_.as<int32_t>(),
                           batch.return_logits, output);
  const std::chrono::duration<double, std::milli> host = std::chrono::steady_clock::now() - started;
  timer_.finish_step(stream_, host.count());
}

}  // namespace moeserve::cuda

namespace moeserve {

std::unique_ptr<ModelRunner> make_deepseek_cuda_runner(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint,
                                                       const CudaRunnerOptions& options) {
  cuda::check_options(options);
  const cuda::Precision precision = cuda::parse_precision(options.precision);
  cuda::select_cuda_device(options.device);
  auto weights = cuda::DeepseekDeviceWeights::upload(*checkpoint, precision);
  return std::make_unique<cuda::DeepseekCudaRunner>(checkpoint->config(), std::move(weights), options);
}

// --synthetic deepseek-r1 --synthetic-layers N: R1's widths, the first min(3, N - 1) layers dense as in the real
// model, FP8 weights with block scales made on the GPU. Which N fits one H200 (141 GB by the vendor's figure, about
// 139 GiB = 149 GB usable by the driver's), weights in GB of 1e9 bytes (reference §8's sizes, scales ~0.03% more):
//   embedding + lm_head (bf16)   2 x 129,280 x 7,168 x 2 B  =  3.71
//   MLA, every layer (FP8)       187.1 M a layer            =  0.187 N
//   dense MLP, 3 layers (FP8)    396.4 M a layer            =  1.19
//   MoE, N - 3 layers (FP8)      11.32 G a layer (256 experts + shared; the bf16 router 3.7 MB)  = 11.32 (N - 3)
// N = 13: 3.71 + 2.43 + 1.19 + 113.2 = 120.5 GB, leaving ~28 GB for the latent cache (13 x 576 x 2 B = 15.0 KB a
// token in bf16: ~1.3 M tokens in 20 GB), activations (a 16 x 1k prefill step's expert outputs alone take
// 16k x 8 x 7,168 x 4 B = 3.8 GB) and cuBLASLt's workspace. N = 13 (10 MoE layers) is the depth to measure at;
// N = 14 (132 GB) still loads with ~17 GB spare; N = 15 (143.6 GB) leaves too little.
std::unique_ptr<ModelRunner> make_synthetic_deepseek_cuda_runner(const std::string& shape, int layers, uint64_t seed,
                                                                 const CudaRunnerOptions& options) {
  MOESERVE_CHECK(layers >= 1, "--synthetic {} needs --synthetic-layers N (N >= 1; 13 fits one H200)", shape);
  MOESERVE_CHECK(options.synthetic_router == "uniform",
                 "--synthetic-router {}: the synthetic DeepSeek router is uniform only so far", options.synthetic_router);
  cuda::check_options(options);
  deepseek_v3::TinyOptions tiny;
  tiny.shape = shape;  // a published shape (model/deepseek_v3/shapes.h), checked before any device is touched
  tiny.layers = layers;
  deepseek_v3::Config config = deepseek_v3::tiny_config(tiny);
  const cuda::Precision precision = cuda::parse_precision(options.precision);
  cuda::select_cuda_device(options.device);
  auto weights = cuda::DeepseekDeviceWeights::synthetic(config, seed, precision);
  return std::make_unique<cuda::DeepseekCudaRunner>(std::move(config), std::move(weights), options);
}

}  // namespace moeserve
