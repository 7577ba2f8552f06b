// The two loop shapes of the CPU runner's projections, shared by every weight format: decode (few tokens) reads
// each weight row in place and dots it with every token; prefill converts a block of rows to fp32 once and dots
// each converted row with every token. Both give the same bits when the format's row dot and its conversion
// follow dot.h's lane order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "util/thread_pool.h"

namespace moeserve::cpu {

// Below this many tokens, weights are read in place (decode: bandwidth-bound); from it on, each block of rows is
// converted to fp32 once and reused for every token (prefill). Both paths give the same bits (dot.h).
inline constexpr int64_t kDirectTokens = 8;
inline constexpr int64_t kRowBlock = 64;

// y[t, n] = dot(x[t], row n) + bias[n] over rows [0, N), in parallel over row ranges.
template <typename RowDot>
void rows_times_tokens(ThreadPool& pool, int64_t T, int64_t N, const float* bias, float* y, RowDot row_dot) {
  pool.parallel_for(N, 16, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; ++n)
      for (int64_t t = 0; t < T; ++t) y[t * N + n] = row_dot(static_cast<int64_t>(n), t) + (bias ? bias[n] : 0.0f);
  });
}

// The prefill path: rows converted block by block into a thread-local buffer by fill(n0, rows, buffer), then
// dotted with every token.
template <typename FillRows, typename BufferDot>
void blocked_rows_times_tokens(ThreadPool& pool, int64_t T, int64_t N, int64_t row_floats, const float* bias, float* y,
                               FillRows fill, BufferDot buffer_dot) {
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  pool.parallel_for(blocks, 1, [&](size_t b0, size_t b1) {
    thread_local std::vector<float> buffer;
    buffer.resize(kRowBlock * row_floats);
    for (size_t b = b0; b < b1; ++b) {
      const int64_t n0 = static_cast<int64_t>(b) * kRowBlock;
      const int64_t rows = std::min(kRowBlock, N - n0);
      fill(n0, rows, buffer.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r)
          y[t * N + n0 + r] = buffer_dot(buffer.data() + r * row_floats, t) + (bias ? bias[n0 + r] : 0.0f);
    }
  });
}

}  // namespace moeserve::cpu
