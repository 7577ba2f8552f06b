// One engine step's call to the drafter: the step collects, for each speculating sequence it computed, the target
// features of the positions it verified (prefill chunks included) and the tokens that follow them, then asks the
// drafter for every next draft in one call and stores each in its sequence.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "runner/drafter.h"
#include "runner/runner.h"

namespace moeserve::speculative {

class DraftRound {
 public:
  // captured: the step's ForwardOutput::captured, taken at the drafter's aux_layers() in that order.
  DraftRound(Drafter& drafter, const std::vector<std::vector<float>>& captured, int64_t hidden);

  // Positions [start, start + token_rows.size()) of seq are verified, their features at these rows of the batch;
  // seq.tokens already holds the tokens after them. shape: the draft to propose (num_draft_tokens 0: none).
  void add(Sequence& seq, int32_t start, std::span<const int64_t> token_rows, const DraftShape& shape);
  bool empty() const { return sequences_.empty(); }
  const std::vector<Sequence*>& sequences() const { return sequences_; }
  // Calls the drafter and stores every draft in its sequence, checked against the shape asked for.
  void propose();

 private:
  Drafter& drafter_;
  const std::vector<std::vector<float>>& captured_;
  int64_t hidden_;
  std::vector<Sequence*> sequences_;
  std::vector<DraftInput> inputs_;
  std::vector<std::unique_ptr<std::vector<float>>> features_;  // stable storage behind inputs_[i].features
  std::vector<DraftTree> drafts_;
};

// Draft nodes are verified at step index 1 + i after the root; a chain is a causal run, a tree needs the
// runner's tree_parent (empty return for a chain).
std::vector<int32_t> verify_tree_parents(const DraftTree& draft);

}  // namespace moeserve::speculative
