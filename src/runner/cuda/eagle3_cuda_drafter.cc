#include "runner/cuda/eagle3_cuda_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <unordered_set>

#include "runner/cuda/cuda_drafter_pool.h"
#include "runner/cuda/graph_capture.h"
#include "runner/cuda/kernels.h"
#include "runner/eagle3_tree.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

constexpr const char* kOwner = "EAGLE-3 drafter (CUDA)";
constexpr int kLargestChainBatch = 256;  // chains graphed up to this many sequences (graph_capture.h's buckets)

int64_t round_up_pow2(int64_t n) {
  int64_t p = 16;
  while (p < n) p *= 2;
  return p;
}

enum Section { kRowTable, kPosition, kSlot, kPrefix, kExtraBegin, kExtraCount, kGather, kSections };

}  // namespace

size_t CudaEagle3Drafter::kv_block_bytes(const speculative::Eagle3Config& config, int block_size) {
  return static_cast<size_t>(block_size) * 2 * config.kv_dim() * 2;
}

CudaEagle3Drafter::CudaEagle3Drafter(speculative::Eagle3Config config, Eagle3DeviceWeights weights,
                                     const CudaDrafterOptions& options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      options_(options),
      kv_tables_(drafter_pool_blocks(options, kv_block_bytes(config_, options.block_size), kOwner), options.block_size,
                 kOwner,
                 [this](int32_t from, int32_t to, int32_t slots) {
                   // Ordered on the drafter's stream before anything that reads or writes the copy.
                   const size_t block = kv_block_bytes(config_, kv_tables_.block_size());
                   const size_t slot = block / kv_tables_.block_size();
                   auto* base = static_cast<uint8_t*>(kv_.get());
                   MOESERVE_CUDA_CHECK(cudaMemcpyAsync(base + to * block, base + from * block, slots * slot,
                                                       cudaMemcpyDeviceToDevice, stream_));
                 }) {
  const speculative::Eagle3Config& c = config_;
  MOESERVE_CHECK(c.head_dim == 64 || c.head_dim == 128, "EAGLE-3 drafter (CUDA): head_dim {} (64 or 128)", c.head_dim);
  MOESERVE_CHECK(c.hidden_size % 8 == 0 && c.feature_width() % 8 == 0 && c.num_heads % c.num_kv_heads == 0,
                 "EAGLE-3 drafter (CUDA): hidden size {} and feature width {} must be multiples of 8", c.hidden_size,
                 c.feature_width());
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  inv_freq_ = to_device(speculative::llama_rope_inverse_frequencies(c.rope, c.head_dim));
  spare_block_ = static_cast<int32_t>(kv_tables_.num_blocks());
  kv_ = DeviceBuffer(kv_block_bytes(c, options.block_size) * (kv_tables_.num_blocks() + 1));
  kv_view_ = {kv_.get(), options.block_size, c.num_kv_heads, c.head_dim};
  // Activations for the largest extend piece and graph batch now, before the engine sizes the target's pool.
  ensure_capacity(kExtendRows, kExtendRows, int64_t{kExtendRows} * 64);
}

CudaEagle3Drafter::~CudaEagle3Drafter() {
  clear_graphs();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaEagle3Drafter::clear_graphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

int32_t CudaEagle3Drafter::cached_positions(uint64_t sequence_id) const {
  return kv_tables_.cached_positions(sequence_id);
}

void CudaEagle3Drafter::release(uint64_t sequence_id) { kv_tables_.release(sequence_id); }

void CudaEagle3Drafter::ensure_capacity(int rows, int extras, int64_t table_entries) {
  const speculative::Eagle3Config& c = config_;
  bool moved = false;
  if (rows > row_capacity_ || extras > extra_capacity_ || table_entries > table_capacity_) {
    row_capacity_ = static_cast<int>(round_up_pow2(std::max(rows, row_capacity_)));
    extra_capacity_ = static_cast<int>(round_up_pow2(std::max(extras, extra_capacity_)));
    table_capacity_ = round_up_pow2(std::max(table_entries, table_capacity_));
    moved |= meta_.grow((1 + kSections * static_cast<size_t>(row_capacity_) + extra_capacity_ + table_capacity_) * 4);
  }
  const size_t R = row_capacity_, H = c.hidden_size, F = c.feature_width(), Q = c.q_dim(), KV = c.kv_dim(),
               I = c.intermediate_size, V = c.draft_vocab_size;
  auto grow = [&](DeviceBuffer& buffer, size_t bytes) { moved |= buffer.grow(bytes); };
  grow(tokens_, R * 4);
  grow(features_, R * F * 4);
  grow(features_bf16_, R * F * 2);
  grow(g_, R * H * 4);
  grow(attn_in_, R * 2 * H * 2);
  grow(residual_, R * H * 4);
  grow(qkv_, R * (Q + 2 * KV) * 4);
  grow(q_, R * Q * 2);
  grow(attn_, R * Q * 2);
  grow(proj_, R * H * 4);
  grow(normed_, R * H * 2);
  grow(gate_up_, R * 2 * I * 4);
  grow(act_, R * I * 2);
  grow(logits_, R * V * 4);
  grow(argmax_, R * 4);
  grow(top_values_, R * kMaxDraftTopK * 4);
  grow(top_ids_, R * kMaxDraftTopK * 4);
  if (moved) clear_graphs();
}

DraftRows CudaEagle3Drafter::upload_rows(const std::vector<Row>& rows, const std::vector<const SequenceKv*>& tables,
                                         const std::vector<int32_t>& gather) {
  int64_t stride = 1;
  for (const SequenceKv* kv : tables)
    if (kv != nullptr) stride = std::max<int64_t>(stride, static_cast<int64_t>(kv->blocks.size()));
  int extras = 0;
  for (const Row& row : rows) extras += static_cast<int>(row.extra.size());
  ensure_capacity(static_cast<int>(std::max(rows.size(), gather.size())), extras,
                  static_cast<int64_t>(tables.size()) * stride);
  const size_t R = row_capacity_, extras_at = 1 + kSections * R, tables_at = extras_at + extra_capacity_;
  meta_host_.assign(tables_at + tables.size() * stride, 0);
  meta_host_[0] = static_cast<int32_t>(stride);
  int32_t extra_at = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    meta_host_[1 + kRowTable * R + r] = row.table;
    meta_host_[1 + kPosition * R + r] = row.position;
    meta_host_[1 + kSlot * R + r] = row.slot;
    meta_host_[1 + kPrefix * R + r] = row.prefix;
    meta_host_[1 + kExtraBegin * R + r] = extra_at;
    meta_host_[1 + kExtraCount * R + r] = static_cast<int32_t>(row.extra.size());
    for (int32_t slot : row.extra) meta_host_[extras_at + extra_at++] = slot;
  }
  std::copy(gather.begin(), gather.end(), meta_host_.begin() + 1 + kGather * R);
  for (size_t t = 0; t < tables.size(); ++t) {
    int32_t* table = meta_host_.data() + tables_at + t * stride;
    std::fill(table, table + stride, spare_block_);
    if (tables[t] != nullptr) std::copy(tables[t]->blocks.begin(), tables[t]->blocks.end(), table);
  }
  // Pageable memory: the copy is staged before cudaMemcpyAsync returns, so meta_host_ may change afterwards.
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(meta_.get(), meta_host_.data(), meta_host_.size() * 4, cudaMemcpyHostToDevice,
                                      stream_));
  const int32_t* d = meta_.as<int32_t>();
  DraftRows view;
  view.rows = static_cast<int>(rows.size());
  view.table_stride = d;
  view.block_tables = d + tables_at;
  view.row_table = d + 1 + kRowTable * R;
  view.position = d + 1 + kPosition * R;
  view.slot = d + 1 + kSlot * R;
  view.prefix = d + 1 + kPrefix * R;
  view.extra_begin = d + 1 + kExtraBegin * R;
  view.extra_count = d + 1 + kExtraCount * R;
  view.extra_slots = d + extras_at;
  return view;
}

const int32_t* CudaEagle3Drafter::gather_indices() const { return meta_.as<int32_t>() + 1 + kGather * row_capacity_; }

void CudaEagle3Drafter::upload_tokens(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) return;
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(tokens_.get(), tokens.data(), tokens.size() * 4, cudaMemcpyHostToDevice, stream_));
}

void CudaEagle3Drafter::project(const void* x, int rows, const void* weight, int64_t out_features,
                                int64_t in_features, float* y) {
  if (dense_gemv_supported(rows, in_features))
    launch_dense_gemv(stream_, x, rows, weight, out_features, in_features, nullptr, y);
  else
    blas_.linear(stream_, Precision::bf16, x, rows, weight, out_features, in_features, nullptr, y);
}

void CudaEagle3Drafter::fuse_features(int rows) {
  const speculative::Eagle3Config& c = config_;
  const int64_t F = c.feature_width();
  if (c.norm_before_fc)
    launch_add_rms_norm(stream_, Precision::bf16, features_.as<float>(), nullptr, nullptr, weights_.input_norm, rows,
                        static_cast<int>(F), static_cast<float>(c.rms_norm_eps), features_bf16_.get());
  else
    launch_to_bf16(stream_, features_.as<float>(), rows * F, features_bf16_.get());
  project(features_bf16_.get(), rows, weights_.fc, c.hidden_size, F, g_.as<float>());
}

void CudaEagle3Drafter::forward_layer(const DraftRows& rows) {
  const speculative::Eagle3Config& c = config_;
  const int R = rows.rows, H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  DraftLayerInput input{weights_.embedding,  tokens_.as<int32_t>(), g_.as<float>(), weights_.input_layernorm,
                        weights_.hidden_norm, H, eps, c.norm_before_residual, attn_in_.get(), residual_.as<float>()};
  launch_draft_layer_input(stream_, input, R);
  project(attn_in_.get(), R, weights_.qkv, Q + 2 * KV, 2 * H, qkv_.as<float>());
  launch_draft_rope_kv_write(stream_, qkv_.as<float>(), c.num_heads, inv_freq_.as<float>(), q_.get(), kv_view_, rows);
  launch_draft_attention(stream_, q_.get(), c.num_heads, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), kv_view_,
                         rows, attn_.get());
  project(attn_.get(), R, weights_.o, H, Q, proj_.as<float>());
  // h1 = residual + o_proj(attn); the MLP: h2 = h1 + down(silu(gate(x)) * up(x)), x = post_attention_layernorm(h1).
  launch_add_rms_norm(stream_, Precision::bf16, residual_.as<float>(), proj_.as<float>(), nullptr,
                      weights_.post_attention_layernorm, R, H, eps, normed_.get());
  project(normed_.get(), R, weights_.gate_up, 2 * static_cast<int64_t>(I), H, gate_up_.as<float>());
  launch_silu_mul(stream_, gate_up_.as<float>(), R, I, act_.get());
  project(act_.get(), R, weights_.down, H, I, proj_.as<float>());
  launch_add_rms_norm(stream_, Precision::bf16, residual_.as<float>(), proj_.as<float>(), nullptr, weights_.final_norm,
                      R, H, eps, normed_.get());
}

void CudaEagle3Drafter::logits_of(const float* x, int rows) {
  const speculative::Eagle3Config& c = config_;
  // No delta: x is only read.
  launch_add_rms_norm(stream_, Precision::bf16, const_cast<float*>(x), nullptr, nullptr, weights_.final_norm, rows,
                      c.hidden_size, static_cast<float>(c.rms_norm_eps), normed_.get());
  project(normed_.get(), rows, weights_.lm_head, c.draft_vocab_size, c.hidden_size, logits_.as<float>());
}

int32_t CudaEagle3Drafter::to_target(int32_t draft_id) const {
  return weights_.d2t_host.empty() ? draft_id : draft_id + weights_.d2t_host[draft_id];
}

void CudaEagle3Drafter::extend(std::span<const speculative::DraftInput> inputs, const std::vector<size_t>& chains,
                               const std::vector<size_t>& trees) {
  const speculative::Eagle3Config& c = config_;
  const int64_t H = c.hidden_size, F = c.feature_width();
  std::vector<Row> rows;
  std::vector<int32_t> tokens;
  std::vector<const SequenceKv*> tables;
  std::vector<int64_t> last_row(inputs.size(), -1);
  std::unordered_set<uint64_t> seen;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const speculative::DraftInput& in = inputs[s];
    const int64_t n = static_cast<int64_t>(in.next_tokens.size());
    MOESERVE_CHECK(seen.insert(in.sequence_id).second, "EAGLE-3 drafter (CUDA): sequence {} twice in one call",
                   in.sequence_id);
    SequenceKv& kv = kv_tables_.begin(in, F, c.vocab_size);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t token = in.next_tokens[i];
      const int32_t p = in.start_position + static_cast<int32_t>(i);
      rows.push_back({static_cast<int32_t>(s), p, p, p + 1, {}});
      tokens.push_back(token);
    }
    tables.push_back(&kv);
    if (n > 0) last_row[s] = static_cast<int64_t>(rows.size()) - 1;
  }
  std::vector<int64_t> root_of_row(rows.size(), -1);  // roots_ row each drafting sequence's last row goes to
  int64_t roots = 0;
  for (const auto* group : {&chains, &trees})
    for (size_t s : *group) root_of_row[last_row[s]] = roots++;
  roots_.grow(std::max<int64_t>(roots, 1) * H * 4);

  std::vector<float> features;
  for (const speculative::DraftInput& in : inputs) features.insert(features.end(), in.features.begin(), in.features.end());
  for (size_t begin = 0; begin < rows.size(); begin += kExtendRows) {
    const size_t end = std::min(rows.size(), begin + kExtendRows);
    const int R = static_cast<int>(end - begin);
    const DraftRows view = upload_rows({rows.begin() + begin, rows.begin() + end}, tables, {});
    upload_tokens({tokens.begin() + begin, tokens.begin() + end});
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(features_.get(), features.data() + begin * F, R * F * 4,
                                        cudaMemcpyHostToDevice, stream_));
    fuse_features(R);
    forward_layer(view);
    for (size_t r = begin; r < end; ++r)
      if (root_of_row[r] >= 0)
        MOESERVE_CUDA_CHECK(cudaMemcpyAsync(roots_.as<float>() + root_of_row[r] * H,
                                            residual_.as<float>() + (r - begin) * H, H * 4, cudaMemcpyDeviceToDevice,
                                            stream_));
  }
  for (const speculative::DraftInput& in : inputs)
    kv_tables_.commit(kv_tables_.sequence(in.sequence_id), in.start_position, in.start_token, in.next_tokens);
}

void CudaEagle3Drafter::enqueue_chain(const DraftRows& rows, int k) {
  const speculative::Eagle3Config& c = config_;
  const int R = rows.rows, H = c.hidden_size, V = c.draft_vocab_size;
  // Depth 1 from the roots; each later depth feeds the previous depth's token and prenorm output at the next
  // position (EAGLE's alignment: the node at depth t is fed at root position + t - 1).
  logits_of(g_.as<float>(), R);
  launch_argmax(stream_, logits_.as<float>(), R, V, argmax_.as<int32_t>());
  launch_draft_tokens(stream_, argmax_.as<int32_t>(), weights_.d2t, R, k, 0, tokens_.as<int32_t>(),
                      drafted_.as<int32_t>());
  for (int depth = 1; depth < k; ++depth) {
    DraftRows step = rows;
    step.step = depth - 1;
    forward_layer(step);
    project(normed_.get(), R, weights_.lm_head, V, H, logits_.as<float>());
    launch_argmax(stream_, logits_.as<float>(), R, V, argmax_.as<int32_t>());
    launch_draft_tokens(stream_, argmax_.as<int32_t>(), weights_.d2t, R, k, depth, tokens_.as<int32_t>(),
                        drafted_.as<int32_t>());
    if (depth + 1 < k)
      MOESERVE_CUDA_CHECK(cudaMemcpyAsync(g_.get(), residual_.get(), static_cast<size_t>(R) * H * 4,
                                          cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaEagle3Drafter::draft_chains(std::span<const speculative::DraftInput> inputs,
                                     const std::vector<size_t>& chains, std::vector<speculative::DraftTree>& out) {
  const int64_t H = config_.hidden_size;
  const int S = static_cast<int>(chains.size());
  int k = 0;
  for (size_t s : chains) k = std::max(k, inputs[s].shape.num_draft_tokens);
  // Rows are padded to the graph bucket with or without graphs, so both run the same kernels on the same shapes.
  const bool bucketed = S <= kLargestChainBatch;
  const int padded = bucketed ? graph_bucket(S) : S;
  std::vector<Row> rows;
  std::vector<const SequenceKv*> tables;
  for (int i = 0; i < S; ++i) {
    const speculative::DraftInput& in = inputs[chains[i]];
    SequenceKv& kv = kv_tables_.sequence(in.sequence_id);
    // Depths 1 .. k - 1 are fed at slots L .. L + k - 2.
    kv_tables_.reserve_slots(kv, kv.length + k - 1, in.sequence_id);
    rows.push_back({i, kv.length, kv.length, kv.length + 1, {}});
    tables.push_back(&kv);
  }
  for (int i = S; i < padded; ++i) rows.push_back({S, 0, 0, 1, {}});  // the spare block's table
  tables.push_back(nullptr);
  const DraftRows view = upload_rows(rows, tables, {});
  if (drafted_.grow(static_cast<size_t>(padded) * k * 4)) clear_graphs();
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(g_.get(), roots_.get(), S * H * 4, cudaMemcpyDeviceToDevice, stream_));
  // Padding rows run on zeros (finite logits, valid token ids).
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(g_.as<float>() + S * H, 0, (padded - S) * H * 4, stream_));

  const std::pair<int, int> key{padded, k};
  if (!options_.cuda_graphs || !bucketed) {
    enqueue_chain(view, k);
  } else if (auto it = graphs_.find(key); it != graphs_.end()) {
    MOESERVE_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  } else {
    // First call of this shape: run it directly (which also makes every cuBLASLt plan), then capture. The
    // captured run writes the same scratch slots again.
    enqueue_chain(view, k);
    graphs_[key] = capture_graph(stream_, [&] { enqueue_chain(view, k); });
  }
  std::vector<int32_t> drafted(static_cast<size_t>(S) * k);
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(drafted.data(), drafted_.get(), drafted.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (int i = 0; i < S; ++i) {
    speculative::DraftTree& tree = out[chains[i]];
    const int n = inputs[chains[i]].shape.num_draft_tokens;
    tree.tokens.assign(drafted.begin() + static_cast<int64_t>(i) * k, drafted.begin() + static_cast<int64_t>(i) * k + n);
    for (int d = 0; d < n; ++d) tree.parent.push_back(d - 1);
  }
}

std::vector<float> CudaEagle3Drafter::top_k_rows(int rows, int k) {
  const int V = config_.draft_vocab_size;
  launch_top_k_log_probs(stream_, logits_.as<float>(), rows, V, k, top_values_.as<float>(), top_ids_.as<int32_t>());
  std::vector<float> values(static_cast<size_t>(rows) * k);
  std::vector<int32_t> ids(values.size());
  MOESERVE_CUDA_CHECK(
      cudaMemcpyAsync(values.data(), top_values_.get(), values.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(ids.data(), top_ids_.get(), ids.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> full(static_cast<size_t>(rows) * V, -std::numeric_limits<float>::infinity());
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < k; ++j) full[static_cast<size_t>(r) * V + ids[r * k + j]] = values[r * k + j];
  return full;
}

// One sequence being drafted as a tree: its search, and the store_ row and KV slot of each expanded node.
struct CudaEagle3Drafter::Drafting {
  size_t input = 0;
  SequenceKv* kv = nullptr;
  int32_t root_position = 0;
  std::vector<int64_t> node_row;   // store_ row of each node's prenorm output (-1 until expanded)
  std::vector<int32_t> node_slot;  // KV slot of each node (-1 until expanded)
  int32_t scratch_slots = 0;
  std::unique_ptr<speculative::DraftTreeSearch> search;
};

void CudaEagle3Drafter::draft_trees(std::span<const speculative::DraftInput> inputs, const std::vector<size_t>& trees,
                                    std::vector<speculative::DraftTree>& out, std::vector<std::vector<float>>* scores) {
  const speculative::Eagle3Config& c = config_;
  const int64_t H = c.hidden_size, V = c.draft_vocab_size, S = static_cast<int64_t>(trees.size());
  int top_k = 1;
  int64_t store_rows = S;
  for (size_t s : trees) {
    const speculative::DraftShape& shape = inputs[s].shape;
    MOESERVE_CHECK(shape.top_k <= kMaxDraftTopK && shape.top_k <= V,
                   "EAGLE-3 drafter (CUDA): top_k {} (at most {} and the draft vocabulary)", shape.top_k, kMaxDraftTopK);
    top_k = std::max(top_k, shape.top_k);
    store_rows += static_cast<int64_t>(shape.num_draft_tokens) * shape.top_k;
  }
  store_.grow(store_rows * H * 4);
  // The trees' roots follow the chains' in roots_.
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(store_.get(), roots_.as<float>() + roots_first_tree_ * H, S * H * 4,
                                      cudaMemcpyDeviceToDevice, stream_));
  ensure_capacity(static_cast<int>(S), 0, 0);
  logits_of(store_.as<float>(), static_cast<int>(S));
  const std::vector<float> root_log_probs = top_k_rows(static_cast<int>(S), top_k);
  std::vector<Drafting> drafting(S);
  for (int64_t t = 0; t < S; ++t) {
    const speculative::DraftInput& in = inputs[trees[t]];
    Drafting& state = drafting[t];
    state.input = trees[t];
    state.kv = &kv_tables_.sequence(in.sequence_id);
    state.root_position = in.start_position + static_cast<int32_t>(in.next_tokens.size());
    state.search = std::make_unique<speculative::DraftTreeSearch>(
        in.shape, std::span(root_log_probs).subspan(t * V, V));
  }
  int64_t store_used = S;
  // Each depth: every sequence's frontier nodes as one batch, fed their parent's prenorm output at position
  // root + depth - 1, attending to the committed positions and their ancestors' scratch slots.
  for (;;) {
    std::vector<Row> rows;
    std::vector<int32_t> tokens, gather;
    std::vector<const SequenceKv*> tables;
    std::vector<std::pair<Drafting*, int>> owner;
    for (int64_t t = 0; t < S; ++t) {
      Drafting& state = drafting[t];
      const auto& nodes = state.search->nodes();
      state.node_slot.resize(nodes.size(), -1);
      state.node_row.resize(nodes.size(), -1);
      for (int node : state.search->frontier()) {
        const int32_t slot = state.kv->length + state.scratch_slots++;
        Row row{static_cast<int32_t>(t), state.root_position + nodes[node].depth - 1, slot, state.kv->length, {}};
        for (int a = nodes[node].parent; a >= 0; a = nodes[a].parent) row.extra.push_back(state.node_slot[a]);
        std::reverse(row.extra.begin(), row.extra.end());
        row.extra.push_back(slot);
        kv_tables_.reserve_slots(*state.kv, slot + 1, inputs[state.input].sequence_id);
        const int parent = nodes[node].parent;
        gather.push_back(static_cast<int32_t>(parent < 0 ? t : state.node_row[parent]));
        tokens.push_back(to_target(nodes[node].draft_id));
        rows.push_back(std::move(row));
        owner.push_back({&state, node});
      }
      tables.push_back(state.kv);
    }
    if (rows.empty()) break;
    const int R = static_cast<int>(rows.size());
    const DraftRows view = upload_rows(rows, tables, gather);
    upload_tokens(tokens);
    launch_gather_rows(stream_, Precision::f32, store_.get(), H, gather_indices(), R, g_.get());
    forward_layer(view);
    MOESERVE_CUDA_CHECK(cudaMemcpyAsync(store_.as<float>() + store_used * H, residual_.get(), R * H * 4,
                                        cudaMemcpyDeviceToDevice, stream_));
    project(normed_.get(), R, weights_.lm_head, V, H, logits_.as<float>());
    const std::vector<float> log_probs = top_k_rows(R, top_k);
    for (int i = 0; i < R; ++i) {
      auto [state, node] = owner[i];
      state->node_slot[node] = rows[i].slot;
      state->node_row[node] = store_used + i;
    }
    store_used += R;
    for (int i = 0; i < R;) {
      speculative::DraftTreeSearch& search = *owner[i].first->search;
      const int count = static_cast<int>(search.frontier().size());
      search.expand(std::span(log_probs).subspan(static_cast<size_t>(i) * V, static_cast<size_t>(count) * V));
      i += count;
    }
  }
  for (const Drafting& state : drafting)
    out[state.input] = state.search->result([&](int32_t id) { return to_target(id); },
                                            scores != nullptr ? &(*scores)[state.input] : nullptr);
}

void CudaEagle3Drafter::propose_scored(std::span<const speculative::DraftInput> inputs,
                                       std::vector<speculative::DraftTree>& out,
                                       std::vector<std::vector<float>>* scores) {
  out.assign(inputs.size(), {});
  if (scores != nullptr) scores->assign(inputs.size(), {});
  std::vector<size_t> chains, trees;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const speculative::DraftShape& shape = inputs[s].shape;
    if (shape.num_draft_tokens == 0) continue;
    (shape.is_chain() && scores == nullptr ? chains : trees).push_back(s);
  }
  extend(inputs, chains, trees);
  roots_first_tree_ = static_cast<int64_t>(chains.size());
  if (!chains.empty()) draft_chains(inputs, chains, out);
  if (!trees.empty()) draft_trees(inputs, trees, out, scores);
  // Speculative KV does not survive the call.
  for (const auto* group : {&chains, &trees})
    for (size_t s : *group) {
      SequenceKv& kv = kv_tables_.sequence(inputs[s].sequence_id);
      kv_tables_.truncate(kv, kv.length);
    }
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace moeserve::cuda

namespace moeserve {

std::unique_ptr<speculative::Drafter> make_cuda_eagle3_drafter(
    std::shared_ptr<const speculative::Eagle3Checkpoint> head, speculative::Eagle3Target target,
    const CudaDrafterOptions& options) {
  const speculative::Eagle3Config& c = head->config();
  MOESERVE_CHECK(c.vocab_size == target.vocab_size && c.target_hidden_size == target.hidden_size,
                 "EAGLE-3 drafter {}: made for vocabulary {} and hidden size {}, the target has {} and {}",
                 head->directory(), c.vocab_size, c.target_hidden_size, target.vocab_size, target.hidden_size);
  for (int layer : c.aux_layer_ids)
    MOESERVE_CHECK(layer < target.num_layers, "EAGLE-3 drafter {}: aux layer {} but the target has {} layers",
                   head->directory(), layer, target.num_layers);
  MOESERVE_CUDA_CHECK(cudaSetDevice(options.device));
  auto weights = cuda::Eagle3DeviceWeights::upload(*head, target);
  return std::make_unique<cuda::CudaEagle3Drafter>(c, std::move(weights), options);
}

std::unique_ptr<speculative::Drafter> make_synthetic_cuda_eagle3_drafter(const ModelConfig& target,
                                                                         const CudaDrafterOptions& options,
                                                                         uint64_t seed) {
  MOESERVE_CUDA_CHECK(cudaSetDevice(options.device));
  speculative::Eagle3Config config =
      cuda::synthetic_eagle3_config(target.hidden_size, target.vocab_size, target.num_layers);
  auto weights = cuda::Eagle3DeviceWeights::synthetic(config, seed);
  return std::make_unique<cuda::CudaEagle3Drafter>(std::move(config), std::move(weights), options);
}

}  // namespace moeserve
