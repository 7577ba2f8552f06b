// How many tokens a request's output will have, for the slo policy's projection of its mean TPOT (scheduler.h):
// learnt from the output lengths of recent finished requests that could have stopped early.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "engine/request.h"

namespace moeserve {

// A request may end before max_tokens when it has stop tokens (the model's end of sequence, a client's stop) or a
// grammar (which can end it when its document is whole). One without either runs to max_tokens: bench forces its
// synthetic and fixed-length outputs that way.
bool may_stop_early(const RequestSpec& spec);

class OutputLengthEstimate {
 public:
  explicit OutputLengthEstimate(size_t window = 1024) : window_(window) {}

  // A request that could have stopped early finished with `tokens` generated (stopped or at max_tokens).
  void observe(int tokens);
  // The output length that all but kShortShare of the recent finished requests longer than `generated` reached:
  // a request that got this far is expected to get at least that far. 0 when none of them was longer.
  int likely_length(int generated) const;

  // One request in 100 that got as far ends sooner: the share p99 leaves. Such a request may have spent slack it
  // did not have (the headroom covers some of it); the mean length instead would let half of them plan on tokens
  // they never produce.
  static constexpr double kShortShare = 0.01;

 private:
  size_t window_;
  std::deque<int> recent_;  // in the order they finished, at most window_
  std::vector<int> sorted_;  // the same lengths, sorted
};

}  // namespace moeserve
