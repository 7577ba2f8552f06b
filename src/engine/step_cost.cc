#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>

namespace moeserve {

void StepCostModel::observe(int decode_tokens, int prefill_tokens, double seconds) {
  samples_.push_back({static_cast<double>(decode_tokens), static_cast<double>(prefill_tokens), seconds});
  if (samples_.size() > window_) samples_.pop_front();
  // Normal equations A^T A x = A^T y for rows [1, decode, prefill]; solved by Cramer's rule.
  double m[3][3] = {}, v[3] = {};
  for (const auto& s : samples_) {
    const double row[3] = {1.0, s[0], s[1]};
    for (int i = 0; i < 3; ++i) {
      v[i] += row[i] * s[2];
      for (int j = 0; j < 3; ++j) m[i][j] += row[i] * row[j];
    }
  }
  auto det3 = [](const double a[3][3]) {
    return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
           a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
  };
  const double det = det3(m);
  if (std::abs(det) < 1e-9 * (1 + std::abs(m[1][1] * m[2][2]))) return;  // degenerate: keep the current fit
  double x[3];
  for (int k = 0; k < 3; ++k) {
    double t[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) t[i][j] = j == k ? v[i] : m[i][j];
    x[k] = det3(t) / det;
  }
  // Costs cannot be negative; a negative fit means noise dominates that term.
  cost_.base_seconds = std::max(0.0, x[0]);
  cost_.per_decode_token_seconds = std::max(0.0, x[1]);
  cost_.per_prefill_token_seconds = std::max(0.0, x[2]);
}

}  // namespace moeserve
