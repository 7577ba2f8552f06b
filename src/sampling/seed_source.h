// Sampling seeds for requests that give none, drawn from one seed for the whole engine (vLLM's --seed): the n-th
// draw is a splitmix64 hash of (seed, n). Without a given seed the source starts from a random one, so unseeded
// requests differ from run to run and from each other; with one, a process replays the same sequence of seeds
// in the same order of requests. A request that gives its own seed never draws, so it stays reproducible.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <random>

#include "sampling/sampling_uniform.h"

namespace moeserve {

class SeedSource {
 public:
  explicit SeedSource(std::optional<uint64_t> seed)
      : seed_(seed ? *seed : (uint64_t{std::random_device{}()} << 32 | std::random_device{}())) {}

  uint64_t seed() const { return seed_; }
  // Safe from any thread.
  uint64_t next() { return sampling_mix64(seed_ ^ sampling_mix64(drawn_.fetch_add(1, std::memory_order_relaxed))); }

 private:
  uint64_t seed_;
  std::atomic<uint64_t> drawn_{0};
};

}  // namespace moeserve
