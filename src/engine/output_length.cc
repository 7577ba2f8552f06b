#include "engine/output_length.h"

#include <algorithm>

namespace moeserve {

bool may_stop_early(const RequestSpec& spec) { return !spec.stop_tokens.empty() || spec.grammar != nullptr; }

void OutputLengthEstimate::observe(int tokens) {
  recent_.push_back(tokens);
  sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), tokens), tokens);
  if (recent_.size() <= window_) return;
  sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), recent_.front()));
  recent_.pop_front();
}

int OutputLengthEstimate::likely_length(int generated) const {
  const auto longer = std::upper_bound(sorted_.begin(), sorted_.end(), generated);
  const auto count = sorted_.end() - longer;
  if (count == 0) return 0;
  return longer[static_cast<std::ptrdiff_t>(kShortShare * static_cast<double>(count))];
}

}  // namespace moeserve
