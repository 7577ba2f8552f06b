// A runner step for one sequence from its per-group block tables, for the
// runner tests.
#pragma once

#include <span>
#include <vector>

#include "runner/runner.h"

namespace moeserve::testing {

inline SequenceStep sequence_step(std::span<const int32_t> tokens, int32_t start,
                                  const std::vector<std::vector<int32_t>>& tables, int32_t num_logits) {
  SequenceStep s;
  s.tokens = tokens;
  s.start_position = start;
  for (const auto& t : tables) s.block_tables.emplace_back(t);
  s.num_logits = num_logits;
  return s;
}

}  // namespace moeserve::testing
