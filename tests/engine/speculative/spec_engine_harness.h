// The tiny target with a small vocabulary (so that tests stay fast) and engines over it with a test drafter.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>

#include "engine/engine_core.h"
#include "engine/engine_harness.h"
#include "engine/generate.h"
#include "engine/speculative/test_drafters.h"
#include "model/gpt_oss/checkpoint.h"
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

// Ten greedy requests of 1..70 prompt tokens (ids below vocab) arriving over the first steps, each with one of a
// mix of shapes: chains, trees and plain decoding.
inline std::vector<moeserve::testing::Arrival> mixed_arrivals(uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  const std::vector<std::optional<DraftShape>> shapes = {chain(3), tree(3, 2, 5), std::nullopt, chain(1),
                                                         tree(4, 3, 8)};
  std::vector<moeserve::testing::Arrival> out;
  for (int i = 0; i < 10; ++i) {
    moeserve::testing::Arrival a;
    a.step = std::uniform_int_distribution<int>(0, 5)(rng);
    a.spec.prompt.resize(std::uniform_int_distribution<int>(1, 70)(rng));  // some beyond a window and a chunk
    for (auto& t : a.spec.prompt) t = id(rng);
    a.spec.sampling.temperature = 0.0f;
    a.spec.max_tokens = std::uniform_int_distribution<int>(1, 24)(rng);
    a.spec.speculation = shapes[i % shapes.size()].value_or(DraftShape{});
    out.push_back(a);
  }
  return out;
}

// Runs the requests through an engine over `target` speculating with `drafter`, and expects each output to be
// what `reference` (another runner of the same model) generates for it alone; returns the engine's metrics.
inline EngineMetrics expect_lossless(ModelRunner& target, ModelRunner& reference, std::shared_ptr<Drafter> drafter,
                                     int64_t kv_blocks, const std::vector<moeserve::testing::Arrival>& requests) {
  EngineCore core(target, spec_engine_config(std::move(drafter), kv_blocks));
  const auto results = moeserve::testing::run_requests(core, requests);
  EXPECT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(results.at(i).tokens, alone(reference, requests[i].spec)) << "request " << i;
    EXPECT_EQ(results.at(i).finish, FinishReason::length);
  }
  return core.metrics();
}

}  // namespace moeserve::speculative::testing
