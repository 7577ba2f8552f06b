// Drafters for testing and measuring speculative decoding without a trained draft head:
//  - RandomDrafter: uniformly random tokens (acceptance length about 1); `"method": "test_random"` on the command
//    line, so the engine's verify cost can be measured on any model.
//  - TargetCopyDrafter: runs a copy of the target model and proposes its greedy continuation. With
//    acceptance_rate 1 and greedy decoding every draft token is accepted (acceptance length k + 1); with a lower
//    rate each draft level holds the target's greedy token only with that probability (a wrong one otherwise), so
//    acceptance is set to a chosen rate. With top_k > 1 the greedy token sits at a random sibling position, so
//    accepted tree paths are not the first-child path.
// Both are deterministic: their draws depend on (seed, sequence id, position) only.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "runner/drafter.h"
#include "runner/runner.h"

namespace moeserve::speculative {

class RandomDrafter : public Drafter {
 public:
  RandomDrafter(int32_t vocab_size, uint64_t seed = 0) : vocab_(vocab_size), seed_(seed) {}
  std::vector<int> aux_layers() const override { return {}; }
  void propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) override;
  void release(uint64_t) override {}

 private:
  int32_t vocab_;
  uint64_t seed_;
};

class TargetCopyDrafter : public Drafter {
 public:
  // target: a runner over the engine's checkpoint, used by this drafter alone (its KV pool is allocated here with
  // kv_blocks blocks of block_size tokens, enough for every speculating sequence's context and draft).
  TargetCopyDrafter(std::shared_ptr<ModelRunner> target, int64_t kv_blocks, int block_size = 16,
                    double acceptance_rate = 1.0, uint64_t seed = 0);
  std::vector<int> aux_layers() const override { return {}; }
  void propose(std::span<const DraftInput> inputs, std::vector<DraftTree>& out) override;
  void release(uint64_t sequence_id) override;

 private:
  struct State {
    std::vector<int32_t> tokens;  // the sequence's tokens [0, fed + 1)
    int32_t computed = 0;         // positions with KV in the copy's cache
    std::vector<std::vector<int32_t>> block_tables;  // per KV group
  };
  // Greedy token after state's tokens plus `extra` (computed causally from `computed` on); KV written as it goes.
  int32_t greedy_next(State& state, const std::vector<int32_t>& extra);
  void map_positions(State& state, int64_t end);
  DraftTree draft(State& state, uint64_t sequence_id, const DraftShape& shape);

  std::shared_ptr<ModelRunner> target_;
  int block_size_;
  double acceptance_rate_;
  uint64_t seed_;
  int num_groups_;
  std::vector<int32_t> free_blocks_;
  std::unordered_map<uint64_t, State> states_;
  ForwardOutput output_;
};

}  // namespace moeserve::speculative
