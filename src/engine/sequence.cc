#include "engine/sequence.h"

namespace moeserve {

TimePoint Sequence::deadline(double ttft_target_seconds) const {
  if (spec.deadline) return *spec.deadline;
  return timing.arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ttft_target_seconds));
}

}  // namespace moeserve
