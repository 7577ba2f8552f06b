// The drafter interface: what speculative decoding asks of a draft model (an EAGLE-3 head, DeepSeek's MTP layer,
// or a test draft). It sits beside runner.h: the heads are model forwards that live beside the runner whose
// arithmetic they use, and the engine drives them through this interface only. The engine owns the target,
// verification and the token streams; a drafter only turns the target's captured features into proposals,
// keeping whatever per-sequence state (its own paged KV) it needs.
//
// Alignment (EAGLE-3: SafeAILab/EAGLE eagle/model/cnets.py, vLLM llama_eagle3.py): draft position p consumes the
// target's feature at position p and the embedding of the token at position p + 1, and predicts the token at
// position p + 2. So once the target has verified tokens up to position L (features known for [0, L)) and sampled
// the token at L, the drafter can extend its KV over [.., L) and propose tokens for positions L + 1, L + 2, ...
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moeserve::speculative {

// How one request wants to speculate. top_k == 1 and total_tokens == 0: a chain of num_draft_tokens.
// Otherwise a tree (EAGLE-2/3 dynamic tree): depth num_draft_tokens, top_k children per expanded node, and at most
// total_tokens draft nodes kept (best cumulative draft log-probability), which the target verifies in one forward.
struct DraftShape {
  int num_draft_tokens = 0;  // 0: this step only extends the drafter's state, proposes nothing
  int top_k = 1;
  int total_tokens = 0;      // draft nodes in a tree (excluding the root); 0 with top_k == 1 means a chain
  bool is_chain() const { return top_k == 1; }
};

// What the drafter learns about one sequence in one call.
struct DraftInput {
  uint64_t sequence_id = 0;
  // Features of verified target positions [start_position, start_position + n) that the drafter has not consumed:
  // row i is the concatenation, in the drafter's aux_layers() order, of the target residual stream after each of
  // those layers at position start_position + i; [n, aux_layers().size() * target hidden] floats.
  int32_t start_position = 0;
  // The token at start_position (the verified token whose feature comes first). EAGLE does not need it; a
  // drafter that re-runs a model over the tokens (the test drafters' target copy) does, for position 0.
  int32_t start_token = -1;
  std::span<const float> features;
  // The tokens at positions [start_position + 1, start_position + n + 1): the last is the newest token the target
  // produced (the root of this step's draft).
  std::span<const int32_t> next_tokens;
  DraftShape shape;
};

// A draft for one sequence: nodes in topological order (every parent before its children). Node i proposes
// tokens[i] at depth depth(i) = 1 + depth(parent[i]) (parent -1: a child of the root, depth 1), i.e. at position
// root_position + depth(i). A chain of k is parent = {-1, 0, 1, ..., k - 2}. Siblings are listed in the order the
// drafter ranks them (most likely first), which is the order lossless sampling tries them in.
struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parent;
  size_t size() const { return tokens.size(); }
};

class Drafter {
 public:
  virtual ~Drafter() = default;

  // Target layers (0-based, output-of-layer convention) whose residual streams a DraftInput's features hold.
  virtual std::vector<int> aux_layers() const = 0;

  // One drafting step for a batch of sequences, one DraftInput each (sequence ids distinct). For each sequence the
  // drafter first forgets any of its state at positions >= start_position (the target rolled back, or recomputes
  // after preemption), then consumes the features, then proposes a draft of the requested shape (empty when
  // num_draft_tokens == 0). Speculative state made while drafting is not kept: the next call brings the target's
  // features for whatever was accepted. out is resized to inputs.size().
  virtual void propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) = 0;

  // The sequence is finished or cancelled: free its state.
  virtual void release(uint64_t sequence_id) = 0;

  // Prefix caching: a sequence the drafter holds no state for, about to be admitted, whose tokens begin as
  // `tokens`. A drafter that caches its state by token prefix takes what it holds for this prefix and returns the
  // positions [0, n) it now has for the sequence (n < tokens.size()), as if they had been fed; the engine lets
  // the target's own prefix-cache hit reach no further than n, and feeds the drafter from the target's hit on.
  virtual int32_t match_prefix(uint64_t sequence_id, std::span<const int32_t> tokens) { return 0; }
};

}  // namespace moeserve::speculative
