// The tiny target with a small vocabulary (so that tests stay fast) and engines over it with a test drafter.
#pragma once

#include <memory>

#include "engine/engine_core.h"
#include "engine/generate.h"
#include "engine/speculative/test_drafters.h"
#include "model/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"

namespace moeserve::speculative::testing {

inline std::shared_ptr<const Checkpoint> small_vocab_target() {
  static std::shared_ptr<const Checkpoint> target = [] {
    TinyModelOptions o;
    o.vocab = 512;
    return std::shared_ptr<const Checkpoint>(Checkpoint::open(moeserve::testing::tiny_model(o)));
  }();
  return target;
}

inline std::unique_ptr<CpuRunner> target_runner() { return std::make_unique<CpuRunner>(small_vocab_target(), 2); }

inline std::shared_ptr<Drafter> oracle_drafter(double acceptance_rate, uint64_t seed = 7) {
  return std::make_shared<TargetCopyDrafter>(std::make_shared<CpuRunner>(small_vocab_target(), 2), 4096, 8,
                                             acceptance_rate, seed);
}

inline EngineConfig spec_engine_config(std::shared_ptr<Drafter> drafter, int64_t kv_blocks = 1024,
                                       int max_batched_tokens = 96) {
  EngineConfig config;
  config.block_size = 8;
  config.num_kv_blocks = kv_blocks;
  config.scheduler.max_batched_tokens = max_batched_tokens;
  config.drafter = std::move(drafter);
  return config;
}

inline DraftShape chain(int k) { return {k, 1, 0}; }
inline DraftShape tree(int depth, int top_k, int total) { return {depth, top_k, total}; }

// The request run alone without speculation.
inline std::vector<int32_t> alone(ModelRunner& runner, const RequestSpec& spec) {
  GenerateOptions options;
  options.max_tokens = spec.max_tokens;
  options.sampling = spec.sampling;
  options.stop_tokens = spec.stop_tokens;
  return generate_sequence(runner, spec.prompt, options).tokens;
}

}  // namespace moeserve::speculative::testing
