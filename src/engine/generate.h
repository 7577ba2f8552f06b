// Generation of one sequence on a runner: prefill in chunks, then decode token by token until a stop token or
// max_tokens. The scheduler (engine.h) serves many sequences; this is the direct path `moeserve generate`, tests
// and oracles use for one.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runner/runner.h"
#include "sampling/sampling_params.h"

namespace moeserve {

struct GenerateOptions {
  int max_tokens = 32;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  int prefill_chunk = 512;           // prompt tokens per forward step
  int block_size = 16;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, including a final stop token
  bool stopped = false;         // ended on a stop token (else on max_tokens)
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// on_token, when set, is called with each token as it is produced.
GenerateResult generate_sequence(ModelRunner& runner, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                 const std::function<void(int32_t)>& on_token = {});

}  // namespace moeserve
