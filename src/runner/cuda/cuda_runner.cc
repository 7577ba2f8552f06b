#include "runner/cuda/cuda_runner.h"

#include <algorithm>

#include "model/make_tiny.h"
#include "runner/cuda/graph_capture.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

constexpr int kLargestGraphBatch = 256;
// Query rows per sequence from which prefill attention (tensor-core tiles) beats the per-token kernel.
constexpr int kPrefillAttentionRows = 16;

int graph_bucket(int sequences) {
  int bucket = 1;
  while (bucket < sequences) bucket *= 2;
  return bucket;
}

Precision parse_precision(const std::string& name) {
  if (name == "bf16") return Precision::bf16;
  if (name == "f32") return Precision::f32;
  fail("CUDA runner precision \"{}\" (bf16 or f32)", name);
}

}  // namespace

CudaRunner::CudaRunner(ModelConfig config, DeviceWeights weights, Precision precision,
                       const CudaRunnerOptions& options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      precision_(precision),
      options_(options),
      groups_(kv_groups_of(config_)) {
  const ModelConfig& c = config_;
  MOESERVE_CHECK(c.head_dim == 64, "CUDA runner: head_dim {} (the attention kernels need 64)", c.head_dim);
  const int per_kv = c.heads_per_kv();
  MOESERVE_CHECK(per_kv == 1 || per_kv == 2 || per_kv == 4 || per_kv == 8,
                 "CUDA runner: {} query heads per KV head (1, 2, 4 or 8 supported)", per_kv);
  MOESERVE_CHECK(c.num_experts <= 256 && c.experts_per_token <= 8,
                 "CUDA runner: {} experts, top-{} (at most 256 and top-8)", c.num_experts, c.experts_per_token);
  max_layers_per_group_ = *std::max_element(groups_.layers_in_group.begin(), groups_.layers_in_group.end());
  MOESERVE_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, options.device));
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  inv_freq_ = to_device(rope_inverse_frequencies(c));
}

CudaRunner::~CudaRunner() {
  clear_graphs();
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (sample_staging_ != nullptr) cudaFreeHost(sample_staging_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaRunner::clear_graphs() {
  for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

size_t CudaRunner::kv_block_bytes(int block_size) const {
  return static_cast<size_t>(max_layers_per_group_) * 2 * block_size * config_.kv_dim() * element_bytes(precision_);
}

size_t CudaRunner::device_memory_free() const {
  size_t free_bytes = 0, total_bytes = 0;
  MOESERVE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes + kv_.bytes();  // allocate_kv_cache() gives the current pool back first
}

void CudaRunner::allocate_kv_cache(const KvCacheLayout& layout) {
  MOESERVE_CHECK(layout.block_size > 0 && layout.num_blocks > 0, "KV cache needs a positive block size and count");
  clear_graphs();
  kv_ = DeviceBuffer();  // free first: the pool is most of the memory left
  kv_ = DeviceBuffer(kv_block_bytes(layout.block_size) * (layout.num_blocks + 1));
  layout_ = layout;
  padding_block_ = static_cast<int32_t>(layout.num_blocks);
}

void CudaRunner::fill_kv_cache_random(uint64_t seed) {
  MOESERVE_CHECK(kv_.get() != nullptr, "fill_kv_cache_random() before allocate_kv_cache()");
  launch_fill_uniform(stream_, precision_, kv_.get(), kv_.bytes() / element_bytes(precision_), seed, 0.0f, 1.0f);
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaRunner::MoePath CudaRunner::moe_path(int tokens) const {
  if (precision_ == Precision::f32) return MoePath::reference;
  // Rows per expert on average: the tensor-core GEMV takes 8 or 16 rows per weight pass; beyond that the
  // grouped GEMM's 128-row tiles do more work per weight byte.
  const double per_expert = static_cast<double>(tokens) * config_.experts_per_token / config_.num_experts;
  if (per_expert <= 4) return MoePath::decode_x1;
  if (per_expert <= 12) return MoePath::decode_x2;
  return MoePath::prefill;
}

std::string CudaRunner::moe_path_name(int tokens) const {
  switch (moe_path(tokens)) {
    case MoePath::reference: return "reference";
    case MoePath::decode_x1: return "decode-x1";
    case MoePath::decode_x2: return "decode-x2";
    case MoePath::prefill: return "prefill";
  }
  return "";
}

CudaRunner::Plan CudaRunner::plan_for(const StepMetadata& meta) const {
  Plan plan;
  plan.tokens = meta.num_tokens();
  plan.prefill_attention = precision_ == Precision::bf16 && meta.max_q_len() >= kPrefillAttentionRows;
  plan.splits = attention_decode_splits(plan.tokens, config_.num_kv_heads, multiprocessors_);
  plan.moe = moe_path(plan.tokens);
  return plan;
}

void CudaRunner::ensure_capacity(const StepMetadata& meta, const Plan& plan) {
  const ModelConfig& c = config_;
  const size_t T = plan.tokens, A = element_bytes(precision_), H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(),
               E = c.num_experts, K = c.experts_per_token, I = c.intermediate_size, R = meta.rows().size();
  bool moved = moe_.grow(plan.tokens, c.experts_per_token, c.num_experts);
  auto grow = [&](DeviceBuffer& buffer, size_t bytes) { moved |= buffer.grow(std::max<size_t>(bytes, 16)); };
  grow(x_, T * H * 4);
  grow(normed_, T * H * A);
  grow(qkv_, T * (Q + 2 * KV) * 4);
  grow(q_, T * Q * A);
  grow(attn_, T * Q * A);
  grow(proj_, T * H * 4);
  grow(router_logits_, T * E * 4);
  grow(experts_, T * K * 4);
  grow(expert_weights_, T * K * 4);
  grow(moe_act_, T * K * I * A);
  grow(moe_y_, T * K * H * 4);
  grow(partial_, T * c.num_heads * plan.splits * (c.head_dim + 2) * 4);
  grow(logits_in_, R * H * A);
  grow(logits_, R * c.vocab_size * 4);
  grow(sampled_, R * 4);
  grow(meta_device_, meta.host().size() * 4);
  if (moved) clear_graphs();
}

void CudaRunner::upload(const StepMetadata& meta) {
  const size_t bytes = meta.host().size() * sizeof(int32_t);
  if (bytes > staging_bytes_) {
    if (staging_ != nullptr) MOESERVE_CUDA_CHECK(cudaFreeHost(staging_));
    staging_bytes_ = std::max(bytes, size_t{1} << 20);
    MOESERVE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), staging_bytes_));
  }
  std::copy(meta.host().begin(), meta.host().end(), staging_);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(meta_device_.get(), staging_, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaRunner::run_moe(MoePath path, const MoeGemmParams& params) {
  switch (path) {
    case MoePath::reference: return launch_moe_reference(stream_, precision_, params);
    case MoePath::decode_x1: return launch_moe_decode(stream_, params, 1);
    case MoePath::decode_x2: return launch_moe_decode(stream_, params, 2);
    case MoePath::prefill: return launch_moe_prefill(stream_, params);
  }
}

void CudaRunner::project(const void* x, int rows, const void* weight, int64_t out_features, int64_t in_features,
                         const float* bias, float* y) {
  if (precision_ == Precision::bf16 && dense_gemv_supported(rows, in_features))
    launch_dense_gemv(stream_, x, rows, weight, out_features, in_features, bias, y);
  else
    blas_.linear(stream_, precision_, x, rows, weight, out_features, in_features, bias, y);
}

void CudaRunner::enqueue(const StepMetadata& meta, const Plan& plan, const std::vector<int>& capture_layers,
                         std::vector<std::vector<float>>* captured) {
  const ModelConfig& c = config_;
  const StepView step = meta.view(meta_device_.as<int32_t>());
  const int T = plan.tokens, H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), E = c.num_experts,
            k = c.experts_per_token, R = static_cast<int>(meta.rows().size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = x_.as<float>();

  auto capture = [&](int layer) {
    for (size_t j = 0; j < capture_layers.size(); ++j)
      if (capture_layers[j] == layer) {
        (*captured)[j].resize(static_cast<size_t>(T) * H);
        MOESERVE_CUDA_CHECK(
            cudaMemcpyAsync((*captured)[j].data(), x, (*captured)[j].size() * 4, cudaMemcpyDeviceToHost, stream_));
      }
  };

  const KvView kv{kv_.get(), layout_.block_size, max_layers_per_group_, c.num_kv_heads, c.head_dim};
  const MoeRouting routing = moe_.routing();
  const int rows_per_tile = plan.moe == MoePath::prefill    ? kMoePrefillTileRows
                            : plan.moe == MoePath::decode_x2 ? 16
                                                             : 8;
  const ExpertCombine combine{moe_y_.as<float>(), routing.slot_row, expert_weights_.as<float>(), k};

  launch_embedding(stream_, weights_.dense, weights_.embedding, H, step.token_ids, T, x);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const DeviceLayer& w = weights_.layers[layer];
    launch_add_rms_norm(stream_, precision_, x, nullptr, layer == 0 ? nullptr : &combine, w.attn_norm, T, H, eps,
                        normed_.get());
    if (layer > 0) capture(layer - 1);
    project(normed_.get(), T, w.qkv, Q + 2 * KV, H, w.qkv_bias, qkv_.as<float>());

    const int group = groups_.group_of_layer[layer], slot = groups_.slot_of_layer[layer];
    RopeParams rope{qkv_.as<float>(), c.num_heads, c.num_kv_heads, c.head_dim, inv_freq_.as<float>(),
                    static_cast<float>(c.rope_concentration()), q_.get(), kv, group, slot};
    launch_rope_kv_write(stream_, precision_, rope, step);

    AttentionParams attention{q_.get(), attn_.get(), w.sinks, c.attention_scale(), c.num_heads, c.num_kv_heads,
                              c.head_dim, c.layer_types[layer] == AttentionKind::sliding ? c.sliding_window : 0, kv,
                              group, slot};
    if (plan.prefill_attention)
      launch_attention_prefill(stream_, attention, step);
    else
      launch_attention_decode(stream_, precision_, attention, step, plan.splits, partial_.as<float>());
    project(attn_.get(), T, w.o, H, Q, w.o_bias, proj_.as<float>());

    launch_add_rms_norm(stream_, precision_, x, proj_.as<float>(), nullptr, w.mlp_norm, T, H, eps, normed_.get());
    project(normed_.get(), T, w.router, E, H, w.router_bias, router_logits_.as<float>());
    launch_route_top_k(stream_, router_logits_.as<float>(), T, E, k, experts_.as<int32_t>(),
                       expert_weights_.as<float>(), routing.expert_counts);
    launch_group_by_expert(stream_, experts_.as<int32_t>(), T, k, rows_per_tile, routing);

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
    run_moe(plan.moe, mlp1);
    MoeGemmParams mlp2 = mlp1;
    mlp2.w = w.mlp2;
    mlp2.x = moe_act_.get();
    mlp2.x_row = nullptr;
    mlp2.out = moe_y_.get();
    mlp2.swiglu = false;
    run_moe(plan.moe, mlp2);
  }
  launch_add_rms_norm(stream_, precision_, x, nullptr, &combine, weights_.final_norm, T, H, eps, normed_.get());
  capture(c.num_layers - 1);
  launch_gather_rows(stream_, precision_, normed_.get(), H, meta.logits_rows(meta_device_.as<int32_t>()), R,
                     logits_in_.get());
  project(logits_in_.get(), R, weights_.unembedding, c.vocab_size, H, nullptr,
               logits_.as<float>());
  launch_argmax(stream_, logits_.as<float>(), R, c.vocab_size, sampled_.as<int32_t>());
}

void CudaRunner::forward(const ForwardBatch& batch, ForwardOutput& output) {
  MOESERVE_CHECK(kv_.get() != nullptr, "forward() before allocate_kv_cache()");
  const int S = static_cast<int>(batch.sequences.size());
  bool decode = S > 0 && S <= kLargestGraphBatch && batch.capture_layers.empty();
  for (const SequenceStep& step : batch.sequences)
    decode = decode && step.tokens.size() == 1 && step.num_logits == 1 && step.tree_parent.empty();
  const int bucket = options_.cuda_graphs && decode ? graph_bucket(S) : 0;

  meta_.build(batch, config_, groups_, layout_, bucket, padding_block_, bucket == 0);
  const Plan plan = plan_for(meta_);
  ensure_capacity(meta_, plan);
  upload(meta_);
  output.captured.assign(batch.capture_layers.size(), {});
  if (bucket == 0) {
    enqueue(meta_, plan, batch.capture_layers, &output.captured);
  } else if (auto it = graphs_.find(bucket); it != graphs_.end()) {
    MOESERVE_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  } else {
    // First step of this bucket: run it directly (which also makes every cuBLASLt plan), then capture.
    enqueue(meta_, plan, {}, nullptr);
    graphs_[bucket] = capture_graph(stream_, [&] { enqueue(meta_, plan, {}, nullptr); });
  }

  // Real rows come first; graph padding rows follow and are dropped. Every row has its argmax (in the step, so in
  // the graph); rows that sample overwrite theirs with the sampling kernel's token.
  const auto& rows = meta_.rows();
  int64_t R = 0;
  std::vector<SampleRow> sample_rows;
  for (const StepRow& row : rows) {
    if (row.step == nullptr) break;
    if (row.step->sampling != nullptr && !row.step->sampling->greedy())
      sample_rows.push_back({static_cast<int32_t>(R), row.sample_index, *row.step->sampling});
    ++R;
  }
  sample(sample_rows);
  const int64_t V = config_.vocab_size;
  std::vector<int32_t> tokens(R);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(tokens.data(), sampled_.get(), R * 4, cudaMemcpyDeviceToHost, stream_));
  output.logits.clear();
  if (batch.return_logits) {
    output.logits.resize(R * V);
    MOESERVE_CUDA_CHECK(
        cudaMemcpyAsync(output.logits.data(), logits_.get(), R * V * 4, cudaMemcpyDeviceToHost, stream_));
  }
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  output.rows = R;
  output.sampled.assign(R, -1);
  for (int64_t r = 0; r < R; ++r)
    if (rows[r].step->sampling != nullptr) output.sampled[r] = tokens[r];
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
  const KvView kv{kv_.get(), layout_.block_size, max_layers_per_group_, config_.num_kv_heads, config_.head_dim};
  for (int g = 0; g < groups_.num_groups(); ++g) {
    const KvMoveParams params{kv, move_args_.as<int32_t>(), static_cast<int>(moves.size()),
                              move_args_.as<int32_t>() + table_at[g], groups_.layers_in_group[g]};
    launch_move_kv_slots(stream_, precision_, params);
  }
}

void CudaRunner::sample(const std::vector<SampleRow>& sample_rows) {
  if (sample_rows.empty()) return;
  const size_t bytes = sample_rows.size() * sizeof(SampleRow);
  if (bytes > sample_staging_bytes_) {
    if (sample_staging_ != nullptr) MOESERVE_CUDA_CHECK(cudaFreeHost(sample_staging_));
    sample_staging_bytes_ = std::max(bytes, size_t{256} * sizeof(SampleRow));
    MOESERVE_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sample_staging_), sample_staging_bytes_));
    sample_rows_.grow(sample_staging_bytes_);
  }
  std::copy(sample_rows.begin(), sample_rows.end(), sample_staging_);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(sample_rows_.get(), sample_staging_, bytes, cudaMemcpyHostToDevice, stream_));
  launch_sample(stream_, logits_.as<float>(), config_.vocab_size, sample_rows_.as<SampleRow>(),
                static_cast<int>(sample_rows.size()), sampled_.as<int32_t>());
}

}  // namespace moeserve::cuda

namespace moeserve {

bool cuda_runner_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

std::unique_ptr<ModelRunner> make_cuda_runner(std::shared_ptr<const Checkpoint> checkpoint,
                                              const CudaRunnerOptions& options) {
  const cuda::Precision precision = cuda::parse_precision(options.precision);
  cuda::select_cuda_device(options.device);
  auto weights = cuda::DeviceWeights::upload(*checkpoint, precision);
  return std::make_unique<cuda::CudaRunner>(checkpoint->config(), std::move(weights), precision, options);
}

std::unique_ptr<ModelRunner> make_synthetic_cuda_runner(const std::string& shape, uint64_t seed,
                                                        const CudaRunnerOptions& options) {
  MOESERVE_CHECK(shape == "gpt-oss-20b" || shape == "gpt-oss-120b", "--synthetic \"{}\" (gpt-oss-20b or gpt-oss-120b)",
                 shape);
  const cuda::Precision precision = cuda::parse_precision(options.precision);
  cuda::select_cuda_device(options.device);
  TinyModelOptions tiny;
  tiny.shape = shape;
  ModelConfig config = tiny_model_config(tiny);
  auto weights = cuda::DeviceWeights::synthetic(config, seed, precision);
  return std::make_unique<cuda::CudaRunner>(std::move(config), std::move(weights), precision, options);
}

}  // namespace moeserve
