#include "runner/cuda/cuda_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "model/gpt_oss/make_tiny.h"
#include "runner/cuda/dtype_options.h"
#include "runner/cuda/graph_capture.h"
#include "runner/cuda/nccl_group.h"
#include "runner/cuda/tensor_parallel_cuda_runner.h"
#include "runner/parallel/rank_shard.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

// --activation-dtype: true for FP8 (e4m3) expert-projection inputs.
bool parse_activation_fp8(const std::string& name, Precision precision) {
  const bool bf16 = name == "auto" || name == "bf16" || name == "bfloat16", fp8 = name == "fp8" || name == "fp8_e4m3";
  MOESERVE_CHECK(bf16 || fp8, "--activation-dtype \"{}\" (auto, bf16 or fp8; fp8_e4m3 is fp8)", name);
  MOESERVE_CHECK(!fp8 || precision == Precision::bf16,
                 "--activation-dtype {} needs --dtype bfloat16: float32 keeps f32 activations (use auto)", name);
  return fp8;
}

}  // namespace

CudaRunner::CudaRunner(ModelConfig config, DeviceWeights weights, Precision precision,
                       const CudaRunnerOptions& options, KvScales scales)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      precision_(precision),
      options_(options),
      kv_dtype_(parse_kv_dtype(options.kv_cache_dtype, precision)),
      fp8_activations_(parse_activation_fp8(options.activation_dtype, precision)),
      moe_paths_(options.moe_path_table.empty() ? MoePathTable{} : parse_moe_path_table(options.moe_path_table)),
      kv_scales_(std::move(scales)),
      groups_(kv_groups_of(config_)) {
  const ModelConfig& c = config_;
  MOESERVE_CHECK(c.head_dim == kAttentionHeadDim, "CUDA runner: head_dim {} (the attention kernels need {})",
                 c.head_dim, kAttentionHeadDim);
  const int per_kv = c.heads_per_kv();
  MOESERVE_CHECK(per_kv == 1 || per_kv == 2 || per_kv == 4 || per_kv == 8,
                 "CUDA runner: {} query heads per KV head (1, 2, 4 or 8 supported)", per_kv);
  MOESERVE_CHECK(c.num_experts <= kMaxExperts && c.experts_per_token <= kMaxTopK,
                 "CUDA runner: {} experts, top-{} (at most {} and top-{})", c.num_experts, c.experts_per_token,
                 kMaxExperts, kMaxTopK);
  local_experts_ = options.local_experts > 0 ? options.local_experts : c.num_experts;
  MOESERVE_CHECK(options.first_expert >= 0 && options.first_expert + local_experts_ <= c.num_experts,
                 "CUDA runner: experts {}..{} of {}", options.first_expert, options.first_expert + local_experts_ - 1,
                 c.num_experts);
  if (kv_scales_.k.empty()) kv_scales_ = KvScales::ones(c.num_layers);
  MOESERVE_CHECK(static_cast<int>(kv_scales_.k.size()) == c.num_layers && kv_scales_.v.size() == kv_scales_.k.size(),
                 "CUDA runner: {} K and {} V scales for {} layers", kv_scales_.k.size(), kv_scales_.v.size(),
                 c.num_layers);
  max_layers_per_group_ = groups_.max_layers_per_group();
  MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, options.device));
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MOESERVE_CUDA_CHECK(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming));
  inv_freq_ = to_device(rope_inverse_frequencies(c));
  vocab_ = {0, c.vocab_size};
  MOESERVE_CHECK(options.dense_fp8_min_rows >= 0, "CUDA runner: dense_fp8_min_rows {} (0: never)",
                 options.dense_fp8_min_rows);
  if (fp8_activations_ && options.dense_fp8_min_rows > 0 && weights_.dense == Precision::bf16) {
    dense_fp8_.resize(c.num_layers);
    for (int layer = 0; layer < c.num_layers; ++layer) {
      const DeviceLayer& w = weights_.layers[layer];
      dense_fp8_[layer].qkv.emplace(stream_, w.qkv, c.q_dim() + 2 * c.kv_dim(), c.hidden_size);
      dense_fp8_[layer].o.emplace(stream_, w.o, c.hidden_size, c.q_dim());
    }
    MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

void CudaRunner::check_batch(const ForwardBatch& batch) const {
  MOESERVE_CHECK(kv_.get() != nullptr, "forward() before allocate_kv_cache()");
  StepMetadata scratch;
  scratch.build(batch, config_, groups_, layout_, 0, 0, padding_block_,
                precision_ == Precision::bf16 ? kPrefillAttentionRows : kNoPrefillTiles);
  for (const SequenceStep& step : batch.sequences)
    if (!step.allowed_tokens.empty()) check_allowed_tokens(step, config_.vocab_size);
}

void CudaRunner::join_group(Communicator* communicator, IndexRange vocab) {
  MOESERVE_CHECK(communicator != nullptr, "join_group() needs a communicator");
  const IndexRange slice = split_range(config_.vocab_size, communicator->size(), communicator->rank());
  MOESERVE_CHECK((vocab.begin == 0 && vocab.end == config_.vocab_size) ||
                     (vocab.begin == slice.begin && vocab.end == slice.end),
                 "rank {} of {} given the unembedding rows [{}, {}) of {}", communicator->rank(), communicator->size(),
                 vocab.begin, vocab.end, config_.vocab_size);
  graphs_.clear();
  communicator_ = communicator;
  vocab_ = vocab;
}

CudaRunner::~CudaRunner() {
  graphs_.clear();
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (step_done_ != nullptr) cudaEventDestroy(step_done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

size_t CudaRunner::kv_block_bytes(int block_size) const {
  return groups_.block_bytes(block_size, kv_element_bytes(kv_dtype_));  // [layer slot][K, V][head][token][dim]
}

size_t CudaRunner::device_memory_free() const {
  return device_memory().free + kv_.bytes();  // allocate_kv_cache() gives the current pool back first
}

size_t CudaRunner::device_memory_total() const { return device_memory().total; }

void CudaRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  MOESERVE_CHECK(layout.block_size > 0 && layout.num_blocks > 0, "KV cache needs a positive block size and count");
  graphs_.clear();
  kv_ = DeviceBuffer();  // free first: the pool is most of the memory left
  kv_ = DeviceBuffer(kv_block_bytes(layout.block_size) * (layout.num_blocks + 1));
  layout_ = layout;
  padding_block_ = static_cast<int32_t>(layout.num_blocks);
}

void CudaRunner::fill_kv_cache_random(uint64_t seed) {
  MOESERVE_CHECK(kv_.get() != nullptr, "fill_kv_cache_random() before allocate_kv_cache()");
  fill_kv_random(stream_, kv_dtype_, kv_.get(), kv_.bytes(), seed);
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::string CudaRunner::moe_path_name(int tokens) const {
  return cuda::moe_path_name(
      choose_moe_path(precision_ == Precision::bf16, tokens, config_.experts_per_token, config_.num_experts, moe_paths_,
                      fp8_activations_));
}

CudaRunner::Plan CudaRunner::plan_for(const StepMetadata& meta) const {
  Plan plan;
  plan.tokens = meta.num_tokens();
  plan.prefill_attention = meta.num_q_tiles() > 0;
  plan.splits = precision_ == Precision::f32
                    ? attention_decode_f32_splits(plan.tokens, config_.num_kv_heads, multiprocessors_)
                    : attention_decode_max_splits(kv_dtype_, config_.heads_per_kv(),
                                                  meta.num_decode_groups() * config_.num_kv_heads, multiprocessors_);
  plan.moe = choose_moe_path(precision_ == Precision::bf16, plan.tokens, config_.experts_per_token, config_.num_experts,
                             moe_paths_, fp8_activations_);
  return plan;
}

void CudaRunner::ensure_capacity(const StepMetadata& meta, const Plan& plan, size_t capture_layers) {
  const ModelConfig& c = config_;
  const size_t T = plan.tokens, A = element_bytes(precision_), H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(),
               E = c.num_experts, K = c.experts_per_token, I = c.intermediate_size, R = meta.rows().size();
  bool moved = moe_.grow(plan.tokens, c.experts_per_token, local_experts_, options_.first_expert, c.num_experts);
  auto grow = [&](DeviceBuffer& buffer, size_t bytes) { moved |= buffer.grow(std::max<size_t>(bytes, 16)); };
  grow(x_, T * H * 4);
  grow(normed_, T * H * A);
  // FP8 dense projections run over a multiple of 4 rows (fp8_dense_linear), so their outputs hold that many.
  const bool dense_fp8 = !dense_fp8_.empty() && plan.tokens >= options_.dense_fp8_min_rows;
  const size_t T4 = dense_fp8 ? static_cast<size_t>(fp8_padded_rows(plan.tokens)) : T;
  grow(qkv_, T4 * (Q + 2 * KV) * 4);
  grow(q_, T * Q * A);
  grow(attn_, T * Q * A);
  grow(proj_, T4 * H * 4);
  grow(dense_x_fp8_, dense_fp8 ? T4 * std::max(H, Q) : 0);
  grow(dense_x_scale_, dense_fp8 ? T4 * fp8_blocks(static_cast<int64_t>(std::max(H, Q))) * 4 : 0);
  grow(router_logits_, T * E * 4);
  grow(experts_, T * K * 4);
  grow(expert_weights_, T * K * 4);
  grow(moe_act_, T * K * I * A);
  grow(moe_y_, T * K * H * 4);
  grow(moe_x_fp8_, fp8_activations_ ? T * H : 0);
  grow(moe_x_scale_, fp8_activations_ ? T * 4 : 0);
  grow(moe_act_fp8_, fp8_activations_ ? T * K * I : 0);
  grow(moe_act_scale_, fp8_activations_ ? T * K * 4 : 0);
  grow(moe_out_, communicator_ != nullptr ? T * H * 4 : 0);
  if (plan.moe == MoePath::prefill_wgmma_hot) {
    const bool fp8 = fp8_activations_;
    grow(moe_hot_, static_cast<size_t>(std::max(moe_hot_bytes(kMoeHotSlotsDefault, 2 * I, H, fp8),
                                                moe_hot_bytes(kMoeHotSlotsDefault, H, I, fp8))));
  }
  const size_t decode_units = static_cast<size_t>(meta.num_decode_groups()) * c.num_kv_heads;
  grow(partial_, precision_ == Precision::f32 ? T * c.num_heads * plan.splits * (c.head_dim + 2) * 4
                                              : attention_decode_partial_floats(decode_units, plan.splits) * 4);
  for (DeviceBuffer* counters : {&decode_counters_, &fused_counters_})
    if (counters->grow(std::max<size_t>(counters == &decode_counters_ ? decode_units * 4 : 2 * 4, 16))) {
      moved = true;
      MOESERVE_CUDA_CHECK(cudaMemsetAsync(counters->get(), 0, counters->bytes(), stream_));
    }
  grow(logits_in_, R * H * A);
  // Split, whole rows are made only by steps that need them (gather_whole_logits grows logits_ then).
  grow(logits_, vocab_split() ? 0 : R * c.vocab_size * 4);
  grow(logits_local_, vocab_split() ? R * vocab_.size() * 4 : 0);
  grow(vocab_best_, vocab_split() ? R * sizeof(VocabBest) : 0);
  grow(vocab_bests_, vocab_split() ? R * sizeof(VocabBest) * communicator_->size() : 0);
  grow(sampled_, R * 4);
  grow(captured_, capture_layers * T * H * 4);
  grow(meta_device_, meta.host().size() * 4);
  if (moved) graphs_.clear();
}

void CudaRunner::upload(const StepMetadata& meta) {
  const size_t bytes = meta.host().size() * sizeof(int32_t);
  if (bytes > staging_bytes_) {
    if (staging_ != nullptr) MOESERVE_CUDA_CHECK(cudaFreeHost(staging_));
    staging_bytes_ = std::max(bytes, size_t{1} << 20);
    MOESERVE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), staging_bytes_));
  }
  std::copy(meta.host().begin(), meta.host().end(), staging_);
  timer_.mark(stream_, KernelClass::metadata_upload);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(meta_device_.get(), staging_, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaRunner::project(const void* x, int rows, const void* weight, int64_t out_features, int64_t in_features,
                         const float* bias, float* y) {
  if (precision_ == Precision::bf16 && dense_gemv_supported(rows, in_features))
    launch_dense_gemv(stream_, x, rows, weight, out_features, in_features, bias, y);
  else
    blas_.linear(stream_, precision_, x, rows, weight, out_features, in_features, bias, y);
}

bool CudaRunner::project_dense(const void* x, int rows, const void* weight, const Fp8QuantisedWeight* fp8,
                               int64_t out_features, int64_t in_features, const float* bias, float* y) {
  if (fp8 != nullptr && rows >= options_.dense_fp8_min_rows) {
    const Fp8Activations scratch{dense_x_fp8_.as<uint8_t>(), dense_x_scale_.as<float>()};
    if (fp8_dense_linear(stream_, blas_, x, rows, fp8->view(), scratch, y)) return true;
  }
  project(x, rows, weight, out_features, in_features, bias, y);
  return false;
}

std::optional<Precision> CudaRunner::fused_qkv_fp8_output(int layer, int rows) {
  if (!options_.qkv_fp8_fused || dense_fp8_.empty() || rows < options_.dense_fp8_min_rows) return std::nullopt;
  const Fp8WeightView w = dense_fp8_[layer].qkv->view();
  for (Precision out : {Precision::bf16, Precision::f32})
    if (fp8_dense_available(blas_, rows, w, out)) return out;
  return std::nullopt;
}

void CudaRunner::enqueue(const StepMetadata& meta, const Plan& plan, const std::vector<int>& capture_layers) {
  const ModelConfig& c = config_;
  const StepView step = meta.view(meta_device_.as<int32_t>());
  const int T = plan.tokens, H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts,
            k = c.experts_per_token, R = static_cast<int>(meta.rows().size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = x_.as<float>();

  auto capture = [&](int layer) {
    for (size_t j = 0; j < capture_layers.size(); ++j)
      if (capture_layers[j] == layer)
        MOESERVE_CUDA_CHECK(cudaMemcpyAsync(captured_.as<float>() + j * T * H, x, static_cast<size_t>(T) * H * 4,
                                            cudaMemcpyDeviceToDevice, stream_));
  };

  const KvView kv{kv_.get(), layout_.block_size, max_layers_per_group_, c.num_kv_heads, c.head_dim, kv_dtype_};
  const DecodeScratch decode{plan.splits, partial_.as<float>(), decode_counters_.as<int32_t>()};
  const MoeRouting routing = moe_.routing();
  const int rows_per_tile = moe_rows_per_tile(plan.moe);
  ExpertCombine combine{moe_y_.as<float>(), routing.slot_row, expert_weights_.as<float>(), k};
  // Alone, the next residual add + RMSNorm combines the experts' rows into the residual stream. In a group, a rank's
  // rows are partial sums over its slice of the intermediate dimension, in its own grouped order: the grouping takes
  // rows by atomics (moe_grouping.cu), so row r holds different (token, slot) pairs on different ranks and the rows
  // cannot be summed across ranks as they are. Each rank combines its own rows per token into moe_out_, the ranks
  // sum those [T, H] sums (as the CPU ranks do), and the residual add takes the sum as a dense delta.
  const bool split = communicator_ != nullptr;
  // options_.expert_out_bf16: on the grouped GEMM's paths (prefill-sized steps) the second projection writes bf16
  // rows and the combine reads them; decode-sized steps keep fp32 rows (measured no faster with bf16 ones).
  const bool grouped_gemm = plan.moe == MoePath::prefill_wgmma || plan.moe == MoePath::prefill_wgmma_m256 ||
                            plan.moe == MoePath::prefill_wgmma_deep || plan.moe == MoePath::prefill_wgmma_split ||
                            plan.moe == MoePath::prefill_wgmma_hot;
  const bool y_bf16 = options_.expert_out_bf16 && !split && precision_ == Precision::bf16 && grouped_gemm;
  if (y_bf16) combine.y = nullptr, combine.y_bf16 = moe_y_.get();
  const float* moe_delta = split ? moe_out_.as<float>() : nullptr;
  const ExpertCombine* moe_combine = split ? nullptr : &combine;

  timer_.mark(stream_, KernelClass::embedding);
  launch_embedding(stream_, weights_.dense, weights_.embedding, H, step.token_ids, T, x);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const DeviceLayer& w = weights_.layers[layer];
    const int group = groups_.group_of_layer[layer], slot = groups_.slot_of_layer[layer];
    const float k_scale = kv_scales_.k[layer], v_scale = kv_scales_.v[layer];
    RopeParams rope{qkv_.as<float>(), c.num_heads, c.num_kv_heads, c.head_dim, inv_freq_.as<float>(),
                    static_cast<float>(c.rope_concentration()), q_.get(), kv, group, slot, k_scale, v_scale};
    const bool qkv_rope_fused = options_.fused_qkv_rope && qkv_rope_fused_supported(precision_, T, H, rope);
    // An FP8 QKV product with its input quantised by the norm (options_.qkv_fp8_fused): the product's output type.
    const std::optional<Precision> qkv_fp8_out =
        qkv_rope_fused ? std::nullopt : fused_qkv_fp8_output(layer, T);
    timer_.mark(stream_, KernelClass::norm);
    const float* norm_delta = layer == 0 ? nullptr : moe_delta;
    const ExpertCombine* norm_combine = layer == 0 ? nullptr : moe_combine;
    if (qkv_fp8_out)
      launch_add_rms_norm_e4m3(stream_, x, norm_delta, norm_combine, w.attn_norm, T, H, eps,
                               dense_x_fp8_.as<uint8_t>(), dense_x_scale_.as<float>(), fp8_padded_rows(T));
    else
      launch_add_rms_norm(stream_, precision_, x, norm_delta, norm_combine, w.attn_norm, T, H, eps, normed_.get());
    if (layer > 0) capture(layer - 1);
    timer_.mark(stream_, KernelClass::qkv_projection);
    if (qkv_rope_fused) {  // decode-sized: one launch
      launch_qkv_rope_kv_write(stream_, precision_, normed_.get(), T, w.qkv, H, w.qkv_bias, rope, step);
    } else {
      if (qkv_fp8_out) {
        const Fp8Activations scratch{dense_x_fp8_.as<uint8_t>(), dense_x_scale_.as<float>()};
        fp8_dense_product(stream_, blas_, T, dense_fp8_[layer].qkv->view(), scratch, *qkv_fp8_out, qkv_.get());
        rope.qkv_bias = w.qkv_bias;  // the FP8 product's bias, added as RoPE reads the rows
        if (*qkv_fp8_out == Precision::bf16) rope.qkv_bf16 = qkv_.get();
      } else if (project_dense(normed_.get(), T, w.qkv, dense_fp8_.empty() ? nullptr : &*dense_fp8_[layer].qkv,
                               Q + 2 * KV, H, w.qkv_bias, qkv_.as<float>())) {
        rope.qkv_bias = w.qkv_bias;
      }
      timer_.mark(stream_, KernelClass::rope_kv_write);
      launch_rope_kv_write(stream_, precision_, rope, step);
    }

    // The output projection on FP8 with its input quantised by the prefill attention kernel (options_.o_fp8_fused):
    // every token of the step in prefill tiles (decode groups write bf16 rows).
    const bool o_fp8_fused = options_.o_fp8_fused && precision_ == Precision::bf16 && !split && plan.prefill_attention &&
                             meta.num_decode_groups() == 0 && c.heads_per_kv() % 2 == 0 && !dense_fp8_.empty() &&
                             T >= options_.dense_fp8_min_rows &&
                             fp8_dense_available(blas_, T, dense_fp8_[layer].o->view(), Precision::f32);
    AttentionParams attention{q_.get(), attn_.get(), w.sinks, c.attention_scale(), c.num_heads, c.num_kv_heads,
                              c.head_dim, c.layer_types[layer] == AttentionKind::sliding ? c.sliding_window : 0, kv,
                              group, slot, k_scale, v_scale};
    if (precision_ == Precision::f32) {
      timer_.mark(stream_, KernelClass::attention_decode);
      launch_attention_decode_f32(stream_, attention, step, plan.splits, partial_.as<float>());
    } else {
      // Disjoint tokens: prefill tiles for the long sequences, decode groups for the others.
      if (plan.prefill_attention) {
        if (o_fp8_fused) {
          attention.out_e4m3 = dense_x_fp8_.as<uint8_t>();
          attention.out_scales = dense_x_scale_.as<float>();
          attention.out_scale_rows = fp8_padded_rows(T);
        }
        timer_.mark(stream_, KernelClass::attention_prefill);
        launch_attention_prefill(stream_, attention, step,
                                 options_.attention_units_in_turn ? 0 : std::numeric_limits<int>::max());
      }
      timer_.mark(stream_, KernelClass::attention_decode);
      launch_attention_decode(stream_, attention, step, decode);
    }
    timer_.mark(stream_, KernelClass::output_projection);
    if (options_.fused_o_norm && precision_ == Precision::bf16 && !split && dense_gemv_add_rms_norm_supported(T, Q, H)) {
      // Decode-sized, alone: the projection with the residual add + RMSNorm in its last block, timed as the projection.
      launch_dense_gemv_add_rms_norm(stream_, precision_, attn_.get(), T, w.o, Q, w.o_bias, proj_.as<float>(), x,
                                     w.mlp_norm, H, eps, normed_.get(), fused_counters_.as<int32_t>() + 1);
    } else {
      // In a group each rank's partial sums are summed before the norm, so a rank adds its bias share in the
      // product: the FP8 one (bias left to the norm) is for a runner alone.
      bool o_fp8 = o_fp8_fused;
      if (o_fp8_fused) {
        const Fp8Activations scratch{dense_x_fp8_.as<uint8_t>(), dense_x_scale_.as<float>()};
        fp8_dense_product(stream_, blas_, T, dense_fp8_[layer].o->view(), scratch, Precision::f32, proj_.as<float>());
      } else {
        o_fp8 = project_dense(attn_.get(), T, w.o, dense_fp8_.empty() || split ? nullptr : &*dense_fp8_[layer].o, H, Q,
                              w.o_bias, proj_.as<float>());
      }
      if (communicator_ != nullptr) {
        timer_.mark(stream_, KernelClass::collective);
        communicator_->all_reduce_sum({proj_.as<float>(), static_cast<size_t>(T) * H});
      }
      timer_.mark(stream_, KernelClass::norm);
      launch_add_rms_norm(stream_, precision_, x, proj_.as<float>(), nullptr, w.mlp_norm, T, H, eps, normed_.get(),
                          o_fp8 ? w.o_bias : nullptr);
    }
    timer_.mark(stream_, KernelClass::router);
    // Up to 4 tokens (bf16): the projection, top-k and grouping in one kernel, timed as the router.
    if (options_.fused_router && precision_ == Precision::bf16 && router_route_group_fused_supported(T, H, E, k)) {
      launch_router_route_and_group(stream_, normed_.get(), T, w.router, H, w.router_bias, E, k,
                                    router_logits_.as<float>(), experts_.as<int32_t>(), expert_weights_.as<float>(),
                                    rows_per_tile, routing, fused_counters_.as<int32_t>());
    } else {
      project(normed_.get(), T, w.router, E, H, w.router_bias, router_logits_.as<float>());
      if (T <= kRouteGroupRunnerTokens && route_group_fused_fits(T, k, E)) {  // top-k and grouping in one kernel
        timer_.mark(stream_, KernelClass::grouping);
        launch_route_top_k_and_group(stream_, router_logits_.as<float>(), T, E, k, experts_.as<int32_t>(),
                                     expert_weights_.as<float>(), rows_per_tile, routing);
      } else {
        launch_route_top_k(stream_, router_logits_.as<float>(), T, E, k, experts_.as<int32_t>(),
                           expert_weights_.as<float>(), routing.expert_counts);
        timer_.mark(stream_, KernelClass::grouping);
        launch_group_by_expert(stream_, experts_.as<int32_t>(), T, k, rows_per_tile, routing);
      }
    }

    MoeGemmParams mlp1;
    mlp1.w = w.mlp1;
    mlp1.x = normed_.get();
    mlp1.x_row = routing.row_token;
    mlp1.out = moe_act_.get();
    mlp1.swiglu = true;
    mlp1.swiglu_alpha = c.swiglu_alpha;
    mlp1.swiglu_limit = c.swiglu_limit;
    mlp1.routing = routing;
    mlp1.rows = T * k;
    mlp1.hot.tiles = moe_hot_.as<uint8_t>();  // prefill_wgmma_hot only (ensure_capacity grew it)
    if (options_.moe_hot_min_rows > 0) mlp1.hot.min_rows = options_.moe_hot_min_rows;
    const bool fp8 = fp8_activations_ && moe_path_takes_fp8(plan.moe);
    timer_.mark(stream_, KernelClass::expert_mlp1);
    if (fp8) {
      launch_quantize_rows_e4m3(stream_, normed_.get(), T, H, moe_x_fp8_.as<uint8_t>(), moe_x_scale_.as<float>());
      mlp1.x_fp8 = moe_x_fp8_.as<uint8_t>();
      mlp1.x_scale = moe_x_scale_.as<float>();
    }
    launch_moe_path(stream_, plan.moe, precision_, mlp1);
    MoeGemmParams mlp2 = mlp1;
    mlp2.w = w.mlp2;
    mlp2.x = moe_act_.get();
    mlp2.x_row = nullptr;
    mlp2.out = moe_y_.get();
    mlp2.out_bf16 = y_bf16;
    mlp2.swiglu = false;
    timer_.mark(stream_, KernelClass::expert_mlp2);
    if (fp8) {
      launch_quantize_rows_e4m3(stream_, moe_act_.get(), T * k, w.mlp2.in_features, moe_act_fp8_.as<uint8_t>(),
                                moe_act_scale_.as<float>());
      mlp2.x_fp8 = moe_act_fp8_.as<uint8_t>();
      mlp2.x_scale = moe_act_scale_.as<float>();
    }
    launch_moe_path(stream_, plan.moe, precision_, mlp2);
    if (split) {  // each token's combined partial sums over the intermediate slices (see moe_delta above)
      launch_moe_combine(stream_, combine, T, H, moe_out_.as<float>());
      timer_.mark(stream_, KernelClass::collective);
      communicator_->all_reduce_sum({moe_out_.as<float>(), static_cast<size_t>(T) * H});
    }
  }
  timer_.mark(stream_, KernelClass::norm);
  launch_add_rms_norm(stream_, precision_, x, moe_delta, moe_combine, weights_.final_norm, T, H, eps, normed_.get());
  capture(c.num_layers - 1);
  timer_.mark(stream_, KernelClass::unembedding);
  launch_gather_rows(stream_, precision_, normed_.get(), H, meta.logits_rows(meta_device_.as<int32_t>()), R,
                     logits_in_.get());
  if (!vocab_split()) {
    project(logits_in_.get(), R, weights_.unembedding, c.vocab_size, H, nullptr, logits_.as<float>());
    timer_.mark(stream_, KernelClass::sampling);
    launch_argmax(stream_, logits_.as<float>(), R, c.vocab_size, sampled_.as<int32_t>());
    return;
  }
  // The rank's slice of the vocabulary (see join_group): its logits, each row's best of them, and the merge of
  // every rank's bests (8 bytes a row a rank) into the greedy token, the same as the argmax of the whole row.
  const int slice = static_cast<int>(vocab_.size());
  project(logits_in_.get(), R, weights_.unembedding, slice, H, nullptr, logits_local_.as<float>());
  timer_.mark(stream_, KernelClass::sampling);
  launch_argmax(stream_, logits_local_.as<float>(), R, slice, sampled_.as<int32_t>());
  launch_vocab_best(stream_, logits_local_.as<float>(), R, slice, vocab_.begin, sampled_.as<int32_t>(),
                    vocab_best_.as<VocabBest>());
  timer_.mark(stream_, KernelClass::collective);
  communicator_->all_gather({vocab_best_.as<std::byte>(), R * sizeof(VocabBest)},
                            {vocab_bests_.as<std::byte>(), R * sizeof(VocabBest) * communicator_->size()});
  timer_.mark(stream_, KernelClass::sampling);
  launch_merge_vocab_best(stream_, vocab_bests_.as<VocabBest>(), R, communicator_->size(), sampled_.as<int32_t>());
}

void CudaRunner::gather_whole_logits(int64_t R) {
  const int n = communicator_->size();
  const int64_t V = config_.vocab_size, slice = vocab_.size(), longest = split_range(V, n, 0).size();
  // Pieces of equal size (the collective's rule): every rank's rows padded to the longest slice.
  logits_.grow(std::max<size_t>(R * V * 4, 16));
  vocab_piece_.grow(std::max<size_t>(R * longest * 4, 16));
  vocab_pieces_.grow(std::max<size_t>(n * R * longest * 4, 16));
  if (R == 0) return;
  timer_.mark(stream_, KernelClass::collective);
  MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(vocab_piece_.get(), longest * 4, logits_local_.get(), slice * 4, slice * 4, R,
                                        cudaMemcpyDeviceToDevice, stream_));
  communicator_->all_gather({vocab_piece_.as<std::byte>(), static_cast<size_t>(R * longest * 4)},
                            {vocab_pieces_.as<std::byte>(), static_cast<size_t>(n * R * longest * 4)});
  for (int rank = 0; rank < n; ++rank) {
    const IndexRange s = split_range(V, n, rank);
    MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(logits_.as<float>() + s.begin, V * 4,
                                          vocab_pieces_.as<float>() + rank * R * longest, longest * 4, s.size() * 4,
                                          R, cudaMemcpyDeviceToDevice, stream_));
  }
  timer_.mark(stream_, KernelClass::sampling);  // the logits processing and sampling that follow
}

void CudaRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  launch(batch);
  collect(output);
}

void CudaRunner::launch(const ForwardBatch& batch) {
  MOESERVE_CHECK(kv_.get() != nullptr, "forward() before allocate_kv_cache()");
  MOESERVE_CHECK(!launched_step_, "CUDA runner: a step launched while another is in flight");
  const int S = static_cast<int>(batch.sequences.size());
  LaunchedStep launched;
  launched.started = std::chrono::steady_clock::now();
  // Graphed: decode steps and chain verify steps, every sequence with the same q_len tokens and as many logits rows.
  const int q_len = graph_query_len(batch);
  const int bucket = options_.cuda_graphs && q_len > 0 && !timer_.enabled() ? graph_bucket(S) : 0;

  meta_.build(batch, config_, groups_, layout_, bucket, q_len, padding_block_,
              precision_ == Precision::bf16 ? kPrefillAttentionRows : kNoPrefillTiles);
  const Plan plan = plan_for(meta_);
  ensure_capacity(meta_, plan, batch.capture_layers.size());
  upload(meta_);
  if (bucket == 0)
    enqueue(meta_, plan, batch.capture_layers);
  else
    graphs_.run({bucket, q_len, 0, batch.capture_layers}, stream_, [&] { enqueue(meta_, plan, batch.capture_layers); });
  // The captured layers' rows of the real tokens (graph padding's follow them).
  int64_t real_tokens = 0;
  for (const SequenceStep& step : batch.sequences) real_tokens += static_cast<int64_t>(step.tokens.size());
  launched.captured.assign(batch.capture_layers.size(), {});
  for (size_t j = 0; j < launched.captured.size(); ++j) {
    const int64_t H = config_.hidden_size;
    launched.captured[j].resize(real_tokens * H);
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(launched.captured[j].data(), captured_.as<float>() + j * plan.tokens * H,
                                        real_tokens * H * 4, cudaMemcpyDeviceToHost, stream_));
  }

  // Real rows come first; graph padding rows follow and are dropped. Every row has its argmax (in the step, so in
  // the graph); rows that sample overwrite theirs with the sampling kernel's token.
  LogitsRows::Work& work = launched.logits_rows;
  work = LogitsRows::plan(meta_.rows(), config_.vocab_size);
  // Split by vocabulary, the rows' processing below and returned logits read whole rows: gathered here, after the
  // step (so outside its graph), on every rank alike (every rank sees the same batch). Greedy rows have their token.
  if (vocab_split() && (batch.return_logits || work.reads_logits()))
    gather_whole_logits(work.rows());  // the real rows, the first R of the step's (padding rows follow)
  logits_rows_.launch(stream_, work, config_.vocab_size, logits_.as<float>(), sampled_.as<int32_t>(),
                      batch.return_logits);
  MOESERVE_CUDA_CHECK(cudaEventRecord(step_done_, stream_));
  launched_step_ = std::move(launched);
}

void CudaRunner::collect(ForwardOutput& output) {
  MOESERVE_CHECK(launched_step_, "CUDA runner: collect() without a step launched");
  LaunchedStep launched = std::move(*launched_step_);
  launched_step_.reset();
  MOESERVE_CUDA_CHECK(cudaEventSynchronize(step_done_));
  timer_.finish_step(stream_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                         launched.started).count());
  output.captured = std::move(launched.captured);
  logits_rows_.collect(launched.logits_rows, output);
}

std::vector<int32_t> CudaRunner::last_layer_expert_rows() {
  const int E = local_experts_;  // this runner's experts (an expert-parallel rank's share)
  std::vector<int32_t> offsets(E + 1);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(offsets.data(), moe_.routing().expert_offsets, (E + 1) * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream_));
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<int32_t> rows(E);
  for (int e = 0; e < E; ++e) rows[e] = offsets[e + 1] - offsets[e];
  return rows;
}

void CudaRunner::move_kv_slots(std::span<const std::span<const int32_t>> block_tables,
                               std::span<const KvSlotMove> moves) {
  MOESERVE_CHECK(kv_.get() != nullptr, "move_kv_slots() before allocate_kv_cache()");
  MOESERVE_CHECK(static_cast<int>(block_tables.size()) == groups_.num_groups(), "{} block tables for {} KV groups",
                 block_tables.size(), groups_.num_groups());
  if (moves.empty()) return;
  // One upload: the moves as (from, to) pairs, then every group's block table.
  std::vector<int32_t> args;
  for (const KvSlotMove& move : moves) {
    for (int g = 0; g < groups_.num_groups(); ++g)
      for (const int32_t slot : {move.from, move.to}) {
        const int64_t logical = slot / layout_.block_size;
        MOESERVE_CHECK(slot >= 0 && logical < static_cast<int64_t>(block_tables[g].size()) &&
                           block_tables[g][logical] >= 0 && block_tables[g][logical] < layout_.num_blocks,
                       "KV slot move {} -> {}: slot {} has no block in the table of KV group {} ({} blocks)", move.from,
                       move.to, slot, g, block_tables[g].size());
      }
    args.push_back(move.from);
    args.push_back(move.to);
  }
  std::vector<size_t> table_at;
  for (const auto& table : block_tables) {
    table_at.push_back(args.size());
    args.insert(args.end(), table.begin(), table.end());
  }
  move_args_.grow(args.size() * sizeof(int32_t));
  // From pageable memory: the copy has taken the values when it returns; the kernels follow it on the stream, and
  // so does the next step, which reads what they wrote.
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(move_args_.get(), args.data(), args.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  const KvView kv{kv_.get(), layout_.block_size, max_layers_per_group_, config_.num_kv_heads, config_.head_dim,
                  kv_dtype_};
  for (int g = 0; g < groups_.num_groups(); ++g) {
    const KvMoveParams params{kv, move_args_.as<int32_t>(), static_cast<int>(moves.size()),
                              move_args_.as<int32_t>() + table_at[g], groups_.layers_in_group[g]};
    launch_move_kv_slots(stream_, params);
  }
}

}  // namespace moeserve::cuda

namespace moeserve {

bool cuda_runner_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

namespace {

// --tensor-parallel-size N over GPUs 0 .. N-1, one NCCL rank each.
std::unique_ptr<cuda::DeviceRankGroup> local_gpus(int n) {
  int count = 0;
  MOESERVE_CUDA_CHECK(cudaGetDeviceCount(&count));
  MOESERVE_CHECK(count >= n, "--tensor-parallel-size {} needs {} GPUs; this host shows {}", n, n, count);
  std::vector<int> devices(n);
  for (int d = 0; d < n; ++d) devices[d] = d;
  return std::make_unique<cuda::NcclGroup>(devices);
}

bool split(const CudaRunnerOptions& options) { return options.tensor_parallel_size > 1 || options.expert_parallel; }

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(std::shared_ptr<const Checkpoint> checkpoint,
                                              const CudaRunnerOptions& options) {
  const cuda::Precision precision = cuda::parse_precision(options.precision);
  cuda::select_cuda_device(options.device);
  if (split(options)) {
    const ParallelConfig parallel{options.tensor_parallel_size, options.expert_parallel};
    check_parallel_config(checkpoint->config(), parallel);
    auto upload_slice = [&](const ModelConfig& rank_config, const RankShard& shard) {
      return cuda::upload_rank_weights(*checkpoint, rank_config, shard, precision);
    };
    return cuda::make_tensor_parallel_cuda_runner(checkpoint->config(), parallel,
                                                  local_gpus(parallel.tensor_parallel_size), upload_slice, precision,
                                                  options, cuda::read_kv_scales(*checkpoint));
  }
  auto weights = cuda::DeviceWeights::upload(*checkpoint, precision);
  return std::make_unique<cuda::CudaRunner>(checkpoint->config(), std::move(weights), precision, options,
                                            cuda::read_kv_scales(*checkpoint));
}

std::unique_ptr<ModelRunner> make_synthetic_cuda_runner(const std::string& shape, uint64_t seed,
                                                        const CudaRunnerOptions& options) {
  TinyModelOptions tiny;
  tiny.shape = shape;  // a published shape (model/gpt_oss/shapes.h), checked before any device is touched
  ModelConfig config = tiny_model_config(tiny);
  const cuda::Precision precision = cuda::parse_precision(options.precision);
  cuda::select_cuda_device(options.device);
  const double skew = parse_synthetic_router(options.synthetic_router);
  if (split(options)) {
    // Random weights of each rank's shapes: the bytes and work a rank of the real model has. One seed for all: the
    // tensors every rank holds whole (embedding, router) come out the same on every rank, since each tensor's values
    // depend on its key (its place in the list) and its size only, so the ranks route alike; each rank's unembedding
    // is its rows of the one whole matrix (synthetic's vocab).
    const ParallelConfig parallel{options.tensor_parallel_size, options.expert_parallel};
    auto random_slice = [&](const ModelConfig& rank_config, const RankShard& shard) {
      return cuda::DeviceWeights::synthetic(rank_config, seed, precision, skew, static_cast<int>(shard.experts.size()),
                                            shard.vocab);
    };
    return cuda::make_tensor_parallel_cuda_runner(config, parallel, local_gpus(parallel.tensor_parallel_size),
                                                  random_slice, precision, options, {});
  }
  auto weights = cuda::DeviceWeights::synthetic(config, seed, precision, skew);
  return std::make_unique<cuda::CudaRunner>(std::move(config), std::move(weights), precision, options);
}

}  // namespace moeserve
