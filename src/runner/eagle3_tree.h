// The draft tree search of EAGLE-2/3 (EAGLE-2, arXiv 2406.16858; reference: SafeAILab/EAGLE eagle/model/cnets.py,
// Model.topK_genrate), apart from the model that scores it. The root's top_k children are the first frontier;
// each later depth expands every frontier node into its top_k children and keeps the top_k of those by cumulative
// log-probability as the next frontier. At the end the total_tokens best nodes of all that were scored are kept.
// A chain is the same search with top_k 1.
//
// Ranking is deterministic: higher log-probability first, then the lower draft id (top-k of one distribution),
// or the earlier-made node (across distributions). A parent scores at least as well as its children and is made
// before them, so the kept nodes always include their ancestors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/drafter.h"

namespace moeserve::speculative {

// The k best ids of a row of scores: descending, the lower id first on ties.
std::vector<int32_t> top_k_ids(std::span<const float> scores, int k);

// log_softmax in place.
void log_softmax(std::span<float> row);

class DraftTreeSearch {
 public:
  struct Node {
    int32_t draft_id = 0;
    int parent = -1;  // index into nodes(); -1: a child of the root
    int depth = 1;
    float score = 0;  // cumulative log-probability from the root
    int rank = 0;     // among its siblings, 0 = most likely
  };

  // shape.num_draft_tokens > 0; root_log_probs: the draft's log-probabilities for depth 1.
  DraftTreeSearch(const DraftShape& shape, std::span<const float> root_log_probs);

  // Nodes to run through the draft model next (indices into nodes()), in order; empty once the tree has its depth.
  const std::vector<int>& frontier() const { return frontier_; }
  // The draft's log-probabilities after each frontier node, [frontier().size(), draft vocab], in frontier order.
  void expand(std::span<const float> log_probs);

  const std::vector<Node>& nodes() const { return nodes_; }
  // The kept nodes in output order (by depth, then parent, then rank); draft ids mapped by to_target. When
  // scores is given it receives each kept node's cumulative log-probability, in the same order.
  template <typename ToTarget>
  DraftTree result(ToTarget to_target, std::vector<float>* scores = nullptr) const {
    DraftTree tree;
    if (scores != nullptr) scores->clear();
    for (size_t i : output_order()) {
      tree.tokens.push_back(to_target(nodes_[i].draft_id));
      tree.parent.push_back(nodes_[i].parent < 0 ? -1 : output_index_[nodes_[i].parent]);
      if (scores != nullptr) scores->push_back(nodes_[i].score);
    }
    return tree;
  }

 private:
  void add_children(int parent, std::span<const float> log_probs, std::vector<int>& made);
  void select_frontier(const std::vector<int>& candidates);
  std::vector<size_t> output_order() const;

  DraftShape shape_;
  int vocab_ = 0;
  std::vector<Node> nodes_;
  std::vector<int> frontier_;
  int depth_ = 1;
  mutable std::vector<int32_t> output_index_;
};

}  // namespace moeserve::speculative
