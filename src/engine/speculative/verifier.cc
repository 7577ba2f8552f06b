#include "engine/speculative/verifier.h"

#include <algorithm>

#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve::speculative {
namespace {

// Children of each node (index draft.size() stands for the root), in the drafter's order.
std::vector<std::vector<int32_t>> children_of(const DraftTree& draft) {
  std::vector<std::vector<int32_t>> children(draft.size() + 1);
  for (size_t i = 0; i < draft.size(); ++i) {
    const int32_t parent = draft.parent[i];
    MOESERVE_CHECK(parent >= -1 && parent < static_cast<int32_t>(i), "draft node {} has parent {} (not before it)", i,
                   parent);
    children[parent < 0 ? draft.size() : static_cast<size_t>(parent)].push_back(static_cast<int32_t>(i));
  }
  return children;
}

}  // namespace

size_t draft_depth(const DraftTree& draft) {
  std::vector<size_t> depth(draft.size());
  size_t deepest = 0;
  for (size_t i = 0; i < draft.size(); ++i) {  // parents come first
    const int32_t parent = draft.parent[i];
    depth[i] = parent < 0 ? 1 : depth[static_cast<size_t>(parent)] + 1;
    deepest = std::max(deepest, depth[i]);
  }
  return deepest;
}

double acceptance_uniform(uint64_t seed, uint64_t sample_index, int attempt) {
  // A stream apart from the sampler's (which uses the seed itself) for every sibling position.
  return sampling_uniform(seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(attempt + 1)), sample_index);
}

namespace {

// The walk from the root down the draft. greedy_token(row): the target's greedy token at a row; row_logits(row):
// its logits, only asked for when params sample (temperature > 0).
template <typename GreedyToken, typename RowLogits>
Verdict walk_draft(const DraftTree& draft, const SamplingParams& params, uint64_t sample_index,
                   std::optional<double> forced_acceptance_rate, GreedyToken greedy_token, RowLogits row_logits,
                   int64_t vocab) {
  MOESERVE_CHECK(draft.parent.size() == draft.size(), "draft has {} tokens but {} parents", draft.size(),
                 draft.parent.size());
  const auto children = children_of(draft);
  Verdict verdict;
  size_t node = draft.size();  // the root
  for (;;) {
    const size_t row = node == draft.size() ? 0 : node + 1;
    const uint64_t index = sample_index + verdict.tokens.size();
    const auto& candidates = children[node];
    std::optional<int32_t> accepted;
    if (forced_acceptance_rate) {
      if (!candidates.empty() && acceptance_uniform(params.seed, index, 0) < *forced_acceptance_rate)
        accepted = candidates.front();
    } else if (params.greedy()) {
      const int32_t best = greedy_token(row);
      for (int32_t child : candidates)
        if (draft.tokens[child] == best) {
          accepted = child;
          break;
        }
      if (!accepted) {
        verdict.tokens.push_back(best);
        return verdict;
      }
    } else {
      std::vector<double> weight = filtered_weights(row_logits(row), params);
      double total = 0.0;
      for (double w : weight) total += w;
      for (size_t attempt = 0; attempt < candidates.size() && !accepted; ++attempt) {
        const int32_t token = draft.tokens[candidates[attempt]];
        MOESERVE_CHECK(token >= 0 && token < vocab, "draft token {} is outside the vocabulary of {}", token, vocab);
        const double p = weight[token];
        if (p > 0.0 && acceptance_uniform(params.seed, index, static_cast<int>(attempt)) * total < p) {
          accepted = candidates[attempt];
        } else {
          weight[token] = 0.0;  // rejected: renormalise what is left (the total shrinks)
          total -= p;
        }
      }
      if (!accepted) {
        verdict.tokens.push_back(sample_from_weights(weight, sampling_uniform(params.seed, index)));
        return verdict;
      }
    }
    if (!accepted) {  // forced acceptance rejected: the target's own sample
      verdict.tokens.push_back(params.greedy() ? greedy_token(row) : sample_token(row_logits(row), params, index));
      return verdict;
    }
    verdict.path.push_back(*accepted);
    verdict.tokens.push_back(draft.tokens[*accepted]);
    node = static_cast<size_t>(*accepted);
  }
}

}  // namespace

Verdict verify_draft(const DraftTree& draft, std::span<const float> logits, int64_t vocab, const SamplingParams& params,
                     uint64_t sample_index, std::optional<double> forced_acceptance_rate) {
  MOESERVE_CHECK(static_cast<int64_t>(logits.size()) == static_cast<int64_t>(draft.size() + 1) * vocab,
                 "verification needs {} logits rows for a draft of {}", draft.size() + 1, draft.size());
  auto row_logits = [&](size_t row) { return logits.subspan(row * vocab, vocab); };
  return walk_draft(
      draft, params, sample_index, forced_acceptance_rate, [&](size_t row) { return argmax(row_logits(row)); },
      row_logits, vocab);
}

Verdict verify_draft_greedy(const DraftTree& draft, std::span<const int32_t> row_tokens, const SamplingParams& params,
                            uint64_t sample_index, std::optional<double> forced_acceptance_rate) {
  MOESERVE_CHECK(params.greedy(), "verification from greedy tokens needs greedy sampling");
  MOESERVE_CHECK(row_tokens.size() == draft.size() + 1, "verification needs {} greedy tokens for a draft of {}, got {}",
                 draft.size() + 1, draft.size(), row_tokens.size());
  auto no_logits = [](size_t) -> std::span<const float> { return {}; };
  return walk_draft(
      draft, params, sample_index, forced_acceptance_rate, [&](size_t row) { return row_tokens[row]; }, no_logits, 0);
}

}  // namespace moeserve::speculative
