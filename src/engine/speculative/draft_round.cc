#include "engine/speculative/draft_round.h"

#include <algorithm>

#include "util/error.h"

namespace moeserve::speculative {

DraftRound::DraftRound(Drafter& drafter, const std::vector<std::vector<float>>& captured, int64_t hidden)
    : drafter_(drafter), captured_(captured), hidden_(hidden) {}

void DraftRound::add(Sequence& seq, int32_t start, std::span<const int64_t> token_rows, const DraftShape& shape) {
  const int64_t n = static_cast<int64_t>(token_rows.size());
  MOESERVE_CHECK(start + n < static_cast<int64_t>(seq.tokens.size()),
                 "request {}: features for positions {}..{} need the tokens after them", seq.id, start, start + n);
  const int64_t width = static_cast<int64_t>(captured_.size()) * hidden_;
  auto features = std::make_unique<std::vector<float>>(n * width);
  for (int64_t i = 0; i < n; ++i)
    for (size_t layer = 0; layer < captured_.size(); ++layer)
      std::copy_n(captured_[layer].data() + token_rows[i] * hidden_, hidden_,
                  features->data() + i * width + static_cast<int64_t>(layer) * hidden_);
  DraftInput input;
  input.sequence_id = seq.id;
  input.start_position = start;
  input.start_token = seq.tokens[start];
  input.features = *features;
  input.next_tokens = std::span<const int32_t>(seq.tokens).subspan(start + 1, n);
  input.shape = shape;
  inputs_.push_back(input);
  features_.push_back(std::move(features));
  sequences_.push_back(&seq);
  seq.draft_fed = static_cast<int>(start + n);
}

void DraftRound::propose() {
  drafter_.propose(inputs_, drafts_);
  MOESERVE_CHECK(drafts_.size() == inputs_.size(), "the drafter returned {} drafts for {} sequences", drafts_.size(),
                 inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const DraftShape& shape = inputs_[i].shape;
    const size_t most = shape.is_chain() ? shape.num_draft_tokens : (shape.num_draft_tokens > 0 ? shape.total_tokens : 0);
    MOESERVE_CHECK(drafts_[i].size() <= most && drafts_[i].parent.size() == drafts_[i].size(),
                   "request {}: the drafter proposed {} tokens ({} parents) where at most {} were asked for",
                   inputs_[i].sequence_id, drafts_[i].size(), drafts_[i].parent.size(), most);
    sequences_[i]->draft = std::move(drafts_[i]);
  }
}

std::vector<int32_t> verify_tree_parents(const DraftTree& draft) {
  bool chain = true;
  for (size_t i = 0; i < draft.size(); ++i) chain = chain && draft.parent[i] == static_cast<int32_t>(i) - 1;
  if (chain) return {};
  std::vector<int32_t> parents{-1};
  for (int32_t parent : draft.parent) parents.push_back(parent + 1);  // the root is step index 0
  return parents;
}

}  // namespace moeserve::speculative
