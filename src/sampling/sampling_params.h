// How a request wants its tokens drawn. Filters apply in this order, as transformers' warpers do:
// temperature, top-k, top-p, min-p. Sampling is a pure function of (logits, params, seed, sample index), so a
// fixed seed gives the same tokens on every run, batch composition and runner.
#pragma once

#include <cstdint>

namespace moeserve {

struct SamplingParams {
  float temperature = 1.0f;  // 0 selects greedy (argmax, lowest id on ties)
  int top_k = 0;             // keep the k most likely tokens; 0 keeps all
  float top_p = 1.0f;        // keep the smallest most-likely set whose probability reaches top_p
  float min_p = 0.0f;        // keep tokens with probability >= min_p * the largest probability
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

}  // namespace moeserve
