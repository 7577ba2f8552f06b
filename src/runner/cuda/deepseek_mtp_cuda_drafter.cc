#include "runner/cuda/deepseek_mtp_cuda_drafter.h"

#include <algorithm>
#include <unordered_set>

#include "runner/cuda/cuda_check.h"
#include "runner/cuda/cuda_drafter_pool.h"
#include "runner/cuda/kernels.h"
#include "runner/eagle3_tree.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

constexpr const char* kOwner = "MTP drafter (CUDA)";

}  // namespace

size_t DeepseekMtpCudaDrafter::kv_block_bytes(const deepseek_v3::Config& config, KvDtype dtype, int block_size) {
  return static_cast<size_t>(block_size) * config.latent_width() * kv_element_bytes(dtype);
}

DeepseekMtpCudaDrafter::DeepseekMtpCudaDrafter(DeepseekCudaRunner& target, DeepseekDeviceMtp weights,
                                               const CudaDrafterOptions& options)
    : target_(target),
      weights_(std::move(weights)),
      graphs_on_(options.cuda_graphs && target.cuda_graphs()),
      block_bytes_(kv_block_bytes(target.model_config(), target.kv_dtype(), std::max(options.block_size, 1))),
      cache_layout_{options.block_size, drafter_pool_blocks(options, block_bytes_, kOwner)},
      kv_tables_(cache_layout_.num_blocks, options.block_size, kOwner,
                 [this](int32_t from, int32_t to, int32_t slots) {
                   // Ordered on the target's stream before anything that reads or writes the copy.
                   const size_t slot = block_bytes_ / cache_layout_.block_size;
                   auto* base = static_cast<uint8_t*>(kv_.get());
                   MOESERVE_CUDA_CHECK(cudaMemcpyAsync(base + to * block_bytes_, base + from * block_bytes_,
                                                       slots * slot, cudaMemcpyDeviceToDevice, target_.stream()));
                 }),
      spare_table_{static_cast<int32_t>(cache_layout_.num_blocks)} {
  kv_ = DeviceBuffer(block_bytes_ * (cache_layout_.num_blocks + 1));
}

void DeepseekMtpCudaDrafter::clear_graphs() {
  graphs_.clear();
  scored_graphs_.clear();
}

MlaCacheView DeepseekMtpCudaDrafter::cache_view() const {
  const deepseek_v3::Config& c = target_.model_config();
  const MlaCacheShape shape{c.kv_lora_rank, c.qk_rope_head_dim, cache_layout_.block_size, 1};
  return {kv_.get(), shape, target_.kv_dtype()};
}

void DeepseekMtpCudaDrafter::ensure_rows(int rows) {
  if (rows <= row_capacity_) return;
  clear_graphs();
  row_capacity_ = rows;
  const size_t R = rows, P = DeepseekCudaRunner::fp8_rows(rows), H = target_.model_config().hidden_size,
               A = element_bytes(target_.precision());
  features_.grow(R * H * 4);
  g_.grow(R * H * 4);
  embedded_.grow(R * H * 4);
  enormed_.grow(R * H * A);
  hnormed_.grow(R * H * A);
  if (both_.grow(P * 2 * H * A)) MOESERVE_CUDA_CHECK(cudaMemsetAsync(both_.get(), 0, both_.bytes(), target_.stream()));
  z_.grow(P * H * 4);
  normed_.grow(R * H * A);
}

DeepseekMtpCudaDrafter::Step DeepseekMtpCudaDrafter::upload_step(const ForwardBatch& batch) {
  Step step;
  step.plan = target_.plan_layer_step(batch, pool_layout(), 0, meta_);
  ensure_rows(step.plan.tokens);
  meta_device_.grow(std::max<size_t>(meta_.host().size() * sizeof(int32_t), 16));
  // From pageable memory: the copy has taken the metadata when it returns, and is ordered after the step before.
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(meta_device_.get(), meta_.host().data(), meta_.host().size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, target_.stream()));
  step.view = meta_.view(meta_device_.as<int32_t>());
  return step;
}

void DeepseekMtpCudaDrafter::head_norm(const float* z, int rows, Precision type, void* out) {
  const deepseek_v3::Config& c = target_.model_config();
  // No delta: z is only read.
  launch_add_rms_norm(target_.stream(), type, const_cast<float*>(z), nullptr, nullptr, weights_.head_norm, rows,
                      c.hidden_size, static_cast<float>(c.rms_norm_eps), out);
}

void DeepseekMtpCudaDrafter::forward_rows(const Step& step, const float* g) {
  const deepseek_v3::Config& c = target_.model_config();
  const int R = step.plan.tokens, H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Precision type = target_.precision();
  const size_t A = element_bytes(type);
  cudaStream_t stream = target_.stream();
  // eh_proj's input [enorm(embedding of the row's token); hnorm(g)]: each half normed, then side by side.
  launch_embedding(stream, type, weights_.embedding.values, H, step.view.token_ids, R, embedded_.as<float>());
  launch_add_rms_norm(stream, type, embedded_.as<float>(), nullptr, nullptr, weights_.enorm, R, H, eps, enormed_.get());
  launch_add_rms_norm(stream, type, const_cast<float*>(g), nullptr, nullptr, weights_.hnorm, R, H, eps, hnormed_.get());
  auto* both = static_cast<uint8_t*>(both_.get());
  MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(both, 2 * H * A, enormed_.get(), H * A, H * A, R, cudaMemcpyDeviceToDevice,
                                        stream));
  MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(both + H * A, 2 * H * A, hnormed_.get(), H * A, H * A, R,
                                        cudaMemcpyDeviceToDevice, stream));
  float* z = z_.as<float>();
  target_.project(both_.get(), R, weights_.eh_proj, z);
  target_.decoder_layer(weights_.layer, cache_view(), 0, step.plan, step.view, z);
  // The FFN's output joins the residual stream: z is the layer's output; normed_ its h, the lm_head's input.
  launch_add_rms_norm(stream, type, z, target_.ffn_out(), nullptr, weights_.head_norm, R, H, eps, normed_.get());
}

float* DeepseekMtpCudaDrafter::logits_rows(size_t rows) {
  if (logits_.grow(std::max<size_t>(rows * target_.model_config().vocab_size * 4, 16))) clear_graphs();
  return logits_.as<float>();
}

void DeepseekMtpCudaDrafter::lm_head(int rows, float* logits) {
  target_.project(normed_.get(), rows, weights_.head, logits);
}

void DeepseekMtpCudaDrafter::logits_of(const float* z, int rows) {
  head_norm(z, rows, target_.precision(), normed_.get());
  lm_head(rows, logits_.as<float>());
}

int DeepseekMtpCudaDrafter::extend(std::span<const speculative::DraftInput> inputs, std::vector<int64_t>& last_row) {
  const deepseek_v3::Config& c = target_.model_config();
  const int64_t H = c.hidden_size;
  ForwardBatch batch;
  std::vector<float> features;
  last_row.assign(inputs.size(), -1);
  std::unordered_set<uint64_t> seen;
  int64_t rows = 0;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const speculative::DraftInput& in = inputs[s];
    MOESERVE_CHECK(seen.insert(in.sequence_id).second, "{}: sequence {} twice in one call", kOwner, in.sequence_id);
    SequenceKv& kv = kv_tables_.begin(in, H, c.vocab_size);
    if (in.next_tokens.empty()) continue;
    // Position p is fed the token at p + 1 (drafter.h's alignment): the step's tokens are the next ones.
    SequenceStep step;
    step.tokens = in.next_tokens;
    step.start_position = in.start_position;
    step.block_tables = {kv.blocks};
    step.num_logits = 0;
    batch.sequences.push_back(step);
    features.insert(features.end(), in.features.begin(), in.features.end());
    rows += static_cast<int64_t>(in.next_tokens.size());
    last_row[s] = rows - 1;
  }
  if (rows > 0) {
    const Step step = upload_step(batch);
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(features_.get(), features.data(), features.size() * 4, cudaMemcpyHostToDevice,
                                        target_.stream()));
    // g = model.norm(the target's residual stream), what the head is fed.
    launch_add_rms_norm(target_.stream(), Precision::f32, features_.as<float>(), nullptr, nullptr,
                        target_.weights().final_norm, static_cast<int>(rows), static_cast<int>(H),
                        static_cast<float>(c.rms_norm_eps), g_.get());
    forward_rows(step, g_.as<float>());
  }
  for (const speculative::DraftInput& in : inputs)
    kv_tables_.commit(kv_tables_.sequence(in.sequence_id), in.start_position, in.start_token, in.next_tokens);
  return static_cast<int>(rows);
}

DeepseekCudaRunner::Plan DeepseekMtpCudaDrafter::plan_chain(const std::vector<SequenceKv*>& kvs, int rows, int k,
                                                            std::vector<StepView>& views) {
  const int S = static_cast<int>(kvs.size());
  views.clear();
  if (k == 1) return {};
  // The token drafted at depth d (1-based) is fed at position L + d - 1, L the committed length (the position of
  // the root, the newest token the target produced), in the slot of that position: past the committed ones,
  // dropped at the end of the call. Every depth is planned for the last's context bucket.
  int longest = 1;
  for (const SequenceKv* kv : kvs) longest = std::max(longest, kv->length + k - 1);
  const int context = target_.graph_context(longest);
  const std::vector<int32_t> placeholder(rows, 0);  // replaced on the device by the tokens chosen the depth before
  depth_meta_.resize(k - 1);
  DeepseekCudaRunner::Plan plan;
  size_t slot = 0;
  for (int depth = 1; depth < k; ++depth) {
    ForwardBatch batch;
    for (int i = 0; i < rows; ++i) {
      SequenceStep step;
      step.tokens = std::span(placeholder).subspan(i, 1);
      step.start_position = i < S ? kvs[i]->length + depth - 1 : 0;
      step.block_tables = {i < S ? std::span<const int32_t>(kvs[i]->blocks) : std::span<const int32_t>(spare_table_)};
      step.num_logits = 0;
      batch.sequences.push_back(step);
    }
    plan = target_.plan_layer_step(batch, pool_layout(), context, depth_meta_[depth - 1]);
    slot = std::max(slot, depth_meta_[depth - 1].host().size());
  }
  // Fixed slots, grown by doubling: a graph reads each depth's metadata where it was captured.
  if (slot > slot_ints_) {
    slot_ints_ = std::max(slot, 2 * slot_ints_);
    clear_graphs();
  }
  std::vector<int32_t> staging(static_cast<size_t>(k - 1) * slot_ints_, 0);
  for (int d = 0; d < k - 1; ++d)
    std::copy(depth_meta_[d].host().begin(), depth_meta_[d].host().end(), staging.begin() + d * slot_ints_);
  if (chain_meta_.grow(staging.size() * sizeof(int32_t))) clear_graphs();
  // From pageable memory: the copy has taken the metadata when it returns, and is ordered after the step before.
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(chain_meta_.get(), staging.data(), staging.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, target_.stream()));
  for (int d = 0; d < k - 1; ++d) views.push_back(depth_meta_[d].view(chain_meta_.as<int32_t>() + d * slot_ints_));
  return plan;
}

void DeepseekMtpCudaDrafter::enqueue_chain(const DeepseekCudaRunner::Plan& plan, const std::vector<StepView>& views,
                                           int rows, int k, bool keep_logits) {
  const int V = target_.model_config().vocab_size;
  cudaStream_t stream = target_.stream();
  auto choose = [&](int depth) {
    float* logits = logits_.as<float>() + (keep_logits ? static_cast<int64_t>(depth) * rows * V : 0);
    lm_head(rows, logits);
    launch_argmax(stream, logits, rows, V, drafted_.as<int32_t>() + static_cast<int64_t>(depth) * rows);
  };
  head_norm(roots_.as<float>(), rows, target_.precision(), normed_.get());
  choose(0);
  for (int depth = 1; depth < k; ++depth) {
    const Step step{plan, views[depth - 1]};
    // The feedback g = h of the depth before, from its z (the roots', then z_), before z_ is overwritten.
    head_norm(depth == 1 ? roots_.as<float>() : z_.as<float>(), rows, Precision::f32, g_.get());
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(step.view.token_ids),
                                        drafted_.as<int32_t>() + static_cast<int64_t>(depth - 1) * rows, rows * 4,
                                        cudaMemcpyDeviceToDevice, stream));
    forward_rows(step, g_.as<float>());
    choose(depth);
  }
}

void DeepseekMtpCudaDrafter::draft_chains(std::span<const speculative::DraftInput> inputs,
                                          const std::vector<size_t>& chains, const std::vector<int64_t>& roots,
                                          std::vector<speculative::DraftTree>& out,
                                          std::vector<std::vector<float>>* scores) {
  const deepseek_v3::Config& c = target_.model_config();
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const int S = static_cast<int>(chains.size());
  cudaStream_t stream = target_.stream();
  int k = 0;
  for (size_t s : chains) k = std::max(k, inputs[s].shape.num_draft_tokens);
  // Rows padded to the graph bucket with graphs or without, so both run the same kernels on the same shapes.
  const bool bucketed = S <= kLargestGraphBatch;
  const int rows = bucketed ? graph_bucket(S) : S;
  const bool keep_logits = scores != nullptr;
  std::vector<SequenceKv*> kvs;
  for (size_t s : chains) {
    SequenceKv& kv = kv_tables_.sequence(inputs[s].sequence_id);
    kv_tables_.reserve_slots(kv, kv.length + k - 1, inputs[s].sequence_id);
    kvs.push_back(&kv);
  }
  std::vector<StepView> views;
  const DeepseekCudaRunner::Plan plan = plan_chain(kvs, rows, k, views);
  ensure_rows(rows);
  if (roots_.grow(static_cast<size_t>(rows) * H * 4)) clear_graphs();
  if (drafted_.grow(static_cast<size_t>(k) * rows * 4)) clear_graphs();
  logits_rows(static_cast<size_t>(keep_logits ? k : 1) * rows);
  // Planning may have grown the target's buffers, and its own steps may have since the last capture.
  if (target_.buffers_generation() != target_generation_) {
    clear_graphs();
    target_generation_ = target_.buffers_generation();
  }
  for (int i = 0; i < S; ++i)
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(roots_.as<float>() + i * H, z_.as<float>() + roots[i] * H, H * 4,
                                        cudaMemcpyDeviceToDevice, stream));
  // Padding rows run on zeros: finite logits, token 0 chosen (ties go to the lower index).
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(roots_.as<float>() + S * H, 0, (rows - S) * H * 4, stream));
  auto enqueue = [&] { enqueue_chain(plan, views, rows, k, keep_logits); };
  const std::vector<int> no_layers;
  if (graphs_on_ && bucketed)
    (keep_logits ? scored_graphs_ : graphs_).run({rows, k, plan.context, no_layers}, stream, enqueue);
  else
    enqueue();

  std::vector<int32_t> drafted(static_cast<size_t>(k) * rows);
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(drafted.data(), drafted_.get(), drafted.size() * 4, cudaMemcpyDeviceToHost, stream));
  std::vector<float> logits;  // [k][S][V] when scores are asked for: each depth's real rows
  if (keep_logits) {
    logits.resize(static_cast<size_t>(k) * S * V);
    MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(logits.data(), S * V * 4, logits_.get(), rows * V * 4, S * V * 4, k,
                                          cudaMemcpyDeviceToHost, stream));
  }
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < S; ++i) {
    speculative::DraftTree& tree = out[chains[i]];
    const int n = inputs[chains[i]].shape.num_draft_tokens;
    float score = 0;
    for (int d = 0; d < n; ++d) {
      tree.tokens.push_back(drafted[static_cast<size_t>(d) * rows + i]);
      tree.parent.push_back(d - 1);
      if (!keep_logits) continue;
      std::vector<float> row(logits.begin() + (static_cast<int64_t>(d) * S + i) * V,
                             logits.begin() + (static_cast<int64_t>(d) * S + i + 1) * V);
      speculative::log_softmax(row);
      score += row[tree.tokens.back()];
      (*scores)[chains[i]].push_back(score);
    }
  }
}

void DeepseekMtpCudaDrafter::propose_scored(std::span<const speculative::DraftInput> inputs,
                                            std::vector<speculative::DraftTree>& out,
                                            std::vector<std::vector<float>>* scores) {
  out.assign(inputs.size(), {});
  if (scores != nullptr) scores->assign(inputs.size(), {});
  std::vector<size_t> chains;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const speculative::DraftShape& shape = inputs[s].shape;
    if (shape.num_draft_tokens == 0) continue;
    MOESERVE_CHECK(shape.is_chain(), "{}: sequence {} asks for a tree (top_k {}); the GPU head drafts chains only",
                   kOwner, inputs[s].sequence_id, shape.top_k);
    chains.push_back(s);
  }
  std::vector<int64_t> last_row;
  extend(inputs, last_row);
  if (!chains.empty()) {
    std::vector<int64_t> roots;
    for (size_t s : chains) roots.push_back(last_row[s]);
    draft_chains(inputs, chains, roots, out, scores);
  }
  // Speculative KV does not survive the call.
  for (size_t s : chains) {
    SequenceKv& kv = kv_tables_.sequence(inputs[s].sequence_id);
    kv_tables_.truncate(kv, kv.length);
  }
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(target_.stream()));
}

std::vector<float> DeepseekMtpCudaDrafter::extend_logits(std::span<const speculative::DraftInput> inputs) {
  std::vector<int64_t> last_row;
  const int rows = extend(inputs, last_row);
  std::vector<float> out(static_cast<size_t>(rows) * target_.model_config().vocab_size);
  if (rows == 0) return out;
  logits_rows(rows);
  logits_of(z_.as<float>(), rows);
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), logits_.get(), out.size() * 4, cudaMemcpyDeviceToHost, target_.stream()));
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(target_.stream()));
  return out;
}

}  // namespace moeserve::cuda

namespace moeserve {

std::unique_ptr<speculative::Drafter> make_cuda_mtp_drafter(std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint,
                                                            ModelRunner& target, const CudaDrafterOptions& options) {
  auto* runner = dynamic_cast<cuda::DeepseekCudaRunner*>(&target);
  MOESERVE_CHECK(runner != nullptr,
                 "MTP drafter on the GPU: its target must be the DeepSeek-V3 CUDA runner (got the {} runner of {})",
                 target.name(), checkpoint->directory());
  const deepseek_v3::Config &c = checkpoint->config(), &t = runner->model_config();
  MOESERVE_CHECK(c.hidden_size == t.hidden_size && c.vocab_size == t.vocab_size && c.num_layers == t.num_layers,
                 "MTP drafter on the GPU: {} is not the target's model (hidden {}, vocabulary {}, {} layers against "
                 "{}, {}, {})",
                 checkpoint->directory(), c.hidden_size, c.vocab_size, c.num_layers, t.hidden_size, t.vocab_size,
                 t.num_layers);
  MOESERVE_CUDA_CHECK(cudaSetDevice(options.device));
  auto weights = cuda::DeepseekDeviceMtp::upload(*checkpoint, runner->weights());
  return std::make_unique<cuda::DeepseekMtpCudaDrafter>(*runner, std::move(weights), options);
}

}  // namespace moeserve
