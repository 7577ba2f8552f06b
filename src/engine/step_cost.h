// A model of one engine step's duration: base + per decode token + per prefill token. The SLO-aware scheduler
// sizes batches with it; the engine refits it online from measured step times (least squares over a window of
// recent steps), so it tracks the runner and machine it runs on.
#pragma once

#include <array>
#include <cstddef>
#include <deque>

namespace moeserve {

struct StepCost {
  double base_seconds = 0.002;
  double per_decode_token_seconds = 0.0005;
  double per_prefill_token_seconds = 0.0002;

  double predict(int decode_tokens, int prefill_tokens) const {
    return base_seconds + per_decode_token_seconds * decode_tokens + per_prefill_token_seconds * prefill_tokens;
  }
};

class StepCostModel {
 public:
  explicit StepCostModel(StepCost initial = {}, size_t window = 256) : cost_(initial), window_(window) {}

  const StepCost& cost() const { return cost_; }
  // Adds a measured step and refits when the observations determine all three coefficients.
  void observe(int decode_tokens, int prefill_tokens, double seconds);

 private:
  StepCost cost_;
  size_t window_;
  std::deque<std::array<double, 3>> samples_;  // decode, prefill, seconds
};

}  // namespace moeserve
