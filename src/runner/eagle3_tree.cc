#include "runner/eagle3_tree.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace moeserve::speculative {

std::vector<int32_t> top_k_ids(std::span<const float> scores, int k) {
  std::vector<int32_t> ids(scores.size());
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min<int>(k, static_cast<int>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  ids.resize(k);
  return ids;
}

void log_softmax(std::span<float> row) {
  const float m = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float x : row) sum += std::exp(static_cast<double>(x - m));
  const float log_sum = static_cast<float>(std::log(sum)) + m;
  for (float& x : row) x -= log_sum;
}

DraftTreeSearch::DraftTreeSearch(const DraftShape& shape, std::span<const float> root_log_probs)
    : shape_(shape), vocab_(static_cast<int>(root_log_probs.size())) {
  MOESERVE_CHECK(shape.num_draft_tokens > 0 && shape.top_k > 0 && shape.total_tokens >= 0,
                 "draft shape: {} tokens, top_k {}, total {} is not a draft", shape.num_draft_tokens, shape.top_k,
                 shape.total_tokens);
  std::vector<int> made;
  add_children(-1, root_log_probs, made);
  select_frontier(made);
}

void DraftTreeSearch::add_children(int parent, std::span<const float> log_probs, std::vector<int>& made) {
  const float base = parent < 0 ? 0.0f : nodes_[parent].score;
  const int depth = parent < 0 ? 1 : nodes_[parent].depth + 1;
  const std::vector<int32_t> ids = top_k_ids(log_probs, shape_.top_k);
  for (size_t r = 0; r < ids.size(); ++r) {
    made.push_back(static_cast<int>(nodes_.size()));
    nodes_.push_back({ids[r], parent, depth, base + log_probs[ids[r]], static_cast<int>(r)});
  }
}

void DraftTreeSearch::select_frontier(const std::vector<int>& candidates) {
  frontier_.clear();
  if (depth_ >= shape_.num_draft_tokens) return;  // the deepest nodes are never expanded
  // Stable: among equal scores the earlier-made candidate wins.
  std::vector<int> ranked = candidates;
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) { return nodes_[a].score > nodes_[b].score; });
  ranked.resize(std::min<size_t>(ranked.size(), shape_.top_k));
  frontier_ = ranked;
}

void DraftTreeSearch::expand(std::span<const float> log_probs) {
  MOESERVE_CHECK(!frontier_.empty(), "draft tree: expand() after the last depth");
  MOESERVE_CHECK(log_probs.size() == frontier_.size() * static_cast<size_t>(vocab_),
                 "draft tree: {} log-probabilities for {} frontier nodes of vocabulary {}", log_probs.size(),
                 frontier_.size(), vocab_);
  std::vector<int> made;
  for (size_t f = 0; f < frontier_.size(); ++f)
    add_children(frontier_[f], log_probs.subspan(f * vocab_, vocab_), made);
  ++depth_;
  select_frontier(made);
}

std::vector<size_t> DraftTreeSearch::output_order() const {
  // Keep the total_tokens best of every scored node (ties: the earlier-made, so an ancestor before its
  // descendants); total_tokens 0 keeps them all.
  std::vector<size_t> kept(nodes_.size());
  std::iota(kept.begin(), kept.end(), 0);
  std::stable_sort(kept.begin(), kept.end(), [&](size_t a, size_t b) { return nodes_[a].score > nodes_[b].score; });
  if (shape_.total_tokens > 0 && kept.size() > static_cast<size_t>(shape_.total_tokens))
    kept.resize(shape_.total_tokens);
  // Output order: by depth, then by the parent's output position, then by rank among siblings.
  std::sort(kept.begin(), kept.end(), [&](size_t a, size_t b) {
    return nodes_[a].depth != nodes_[b].depth ? nodes_[a].depth < nodes_[b].depth : a < b;
  });
  output_index_.assign(nodes_.size(), -1);
  std::vector<size_t> order;
  for (size_t begin = 0; begin < kept.size();) {
    size_t end = begin;
    while (end < kept.size() && nodes_[kept[end]].depth == nodes_[kept[begin]].depth) ++end;
    std::vector<size_t> level(kept.begin() + begin, kept.begin() + end);
    std::sort(level.begin(), level.end(), [&](size_t a, size_t b) {
      const int pa = nodes_[a].parent < 0 ? -1 : output_index_[nodes_[a].parent];
      const int pb = nodes_[b].parent < 0 ? -1 : output_index_[nodes_[b].parent];
      return pa != pb ? pa < pb : nodes_[a].rank < nodes_[b].rank;
    });
    for (size_t i : level) {
      MOESERVE_CHECK(nodes_[i].parent < 0 || output_index_[nodes_[i].parent] >= 0,
                     "draft tree: node {} kept without its parent", i);
      output_index_[i] = static_cast<int32_t>(order.size());
      order.push_back(i);
    }
    begin = end;
  }
  return order;
}

}  // namespace moeserve::speculative
