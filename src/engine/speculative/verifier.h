// Verification of one sequence's draft against the target's logits, lossless for deterministic drafts
// (speculative sampling, Leviathan et al. arXiv 2211.17192; vLLM v1/sample/rejection_sampler.py with draft_probs=None):
//  - greedy: follow the children whose token is the target's argmax; emit the argmax where none is (or the bonus
//    token past a fully accepted path);
//  - temperature > 0: at each node, try its children in the drafter's order, accepting child d with probability
//    p(d) under the request's filtered target distribution p (sampler.h: temperature, top-k, top-p, min-p); a
//    rejected child's token gets p = 0 and p is renormalised before the next sibling; when no child is accepted
//    (or the node is a leaf) the emitted token is sampled from the adjusted p. Since a draft is a point mass, this
//    is rejection sampling with q = one-hot, and every emitted token is distributed exactly as p.
// Draws are seeded from (seed, sample index) like the sampler, so a request's stream is reproducible: the final
// draw of each verify step uses the sampler's own uniform, acceptance tests use separate streams per sibling.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "runner/drafter.h"
#include "sampling/sampling_params.h"

namespace moeserve::speculative {

struct Verdict {
  std::vector<int32_t> path;    // accepted draft nodes, shallowest first (node i of a chain is at depth i + 1)
  std::vector<int32_t> tokens;  // the tokens to emit: the accepted nodes' tokens, then the target's own token
};

// logits: [1 + draft.size(), vocab]: row 0 at the root (the last committed token), row 1 + i at node i.
// sample_index: the sampling stream position of the first emitted token (tokens generated so far).
// forced_acceptance_rate: the test switch of SpeculativeConfig::test_acceptance_rate (not lossless): the first
// child of each node on the path is accepted with this probability whatever the target says.
Verdict verify_draft(const DraftTree& draft, std::span<const float> logits, int64_t vocab, const SamplingParams& params,
                     uint64_t sample_index, std::optional<double> forced_acceptance_rate = std::nullopt);

// Greedy verification (params.greedy()) from the target's greedy token of every row instead of its logits:
// row_tokens[0] at the root, row_tokens[1 + i] at node i, as a runner's on-device argmax gives them, so a verify
// step copies back one id per row rather than vocab floats. Same verdict as verify_draft() on those rows' logits.
Verdict verify_draft_greedy(const DraftTree& draft, std::span<const int32_t> row_tokens, const SamplingParams& params,
                            uint64_t sample_index, std::optional<double> forced_acceptance_rate = std::nullopt);

// The uniform in [0, 1) that decides the attempt-th sibling tried for the sample_index-th token.
double acceptance_uniform(uint64_t seed, uint64_t sample_index, int attempt);

// The deepest node's depth (drafter.h), i.e. how many draft positions a verify step can accept; 0 when empty.
size_t draft_depth(const DraftTree& draft);

}  // namespace moeserve::speculative
