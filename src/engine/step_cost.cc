#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace moeserve {

namespace {

// Solves the k x k system a x = b (k <= 3) by Gaussian elimination with partial pivoting; false when singular
// (a pivot below `tiny` times the matrix's scale).
bool solve(int k, double a[3][3], double b[3], double x[3]) {
  double scale = 0;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) scale = std::max(scale, std::abs(a[i][j]));
  if (scale == 0) return false;
  for (int col = 0; col < k; ++col) {
    int pivot = col;
    for (int r = col + 1; r < k; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    if (std::abs(a[pivot][col]) < 1e-12 * scale) return false;
    for (int j = 0; j < k; ++j) std::swap(a[col][j], a[pivot][j]);
    std::swap(b[col], b[pivot]);
    for (int r = col + 1; r < k; ++r) {
      const double f = a[r][col] / a[col][col];
      for (int j = col; j < k; ++j) a[r][j] -= f * a[col][j];
      b[r] -= f * b[col];
    }
  }
  for (int i = k - 1; i >= 0; --i) {
    double s = b[i];
    for (int j = i + 1; j < k; ++j) s -= a[i][j] * x[j];
    x[i] = s / a[i][i];
  }
  return true;
}

}  // namespace

void StepCostModel::observe(int decode_tokens, int prefill_tokens, double seconds) {
  samples_.push_back({static_cast<double>(decode_tokens), static_cast<double>(prefill_tokens), seconds});
  if (samples_.size() > window_) samples_.pop_front();
  // Normal equations for rows [1, decode, prefill]: m = A^T A, v = A^T y, and y^T y for the residuals.
  double m[3][3] = {}, v[3] = {}, yy = 0;
  for (const auto& s : samples_) {
    const double row[3] = {1.0, s[0], s[1]};
    yy += s[2] * s[2];
    for (int i = 0; i < 3; ++i) {
      v[i] += row[i] * s[2];
      for (int j = 0; j < 3; ++j) m[i][j] += row[i] * row[j];
    }
  }
  double best_residual = std::numeric_limits<double>::infinity();
  double best[3] = {0, 0, 0};
  for (int subset = 7; subset >= 1; --subset) {  // the full set first: singular means undetermined
    int index[3], k = 0;
    for (int i = 0; i < 3; ++i)
      if (subset & (1 << i)) index[k++] = i;
    double a[3][3], b[3], x[3];
    for (int i = 0; i < k; ++i) {
      b[i] = v[index[i]];
      for (int j = 0; j < k; ++j) a[i][j] = m[index[i]][index[j]];
    }
    if (!solve(k, a, b, x)) {
      if (subset == 7) return;
      continue;
    }
    bool feasible = true;
    for (int i = 0; i < k; ++i) feasible = feasible && x[i] >= 0;
    if (!feasible) continue;
    double full[3] = {0, 0, 0};
    for (int i = 0; i < k; ++i) full[index[i]] = x[i];
    // |A x - y|^2 = x^T m x - 2 x^T v + y^T y.
    double residual = yy;
    for (int i = 0; i < 3; ++i) {
      residual -= 2 * full[i] * v[i];
      for (int j = 0; j < 3; ++j) residual += full[i] * m[i][j] * full[j];
    }
    if (residual < best_residual) {
      best_residual = residual;
      for (int i = 0; i < 3; ++i) best[i] = full[i];
    }
  }
  if (best_residual == std::numeric_limits<double>::infinity()) return;  // all zero is the fit: keep the current
  cost_.base_seconds = best[0];
  cost_.per_decode_token_seconds = best[1];
  cost_.per_prefill_token_seconds = best[2];
}

}  // namespace moeserve
