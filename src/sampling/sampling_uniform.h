// The sampler's uniform draw, one definition for the host and the GPU (runner/cuda/sampling.cu includes this;
// it compiles as C++17 under nvcc, hence no <span> here): a splitmix64 hash of (seed, sample index), so a token's
// draw depends on nothing but its request's seed and its position in the sampling stream.
#pragma once

#include <cstdint>

#include "util/host_device.h"

namespace moeserve {

MOESERVE_HOST_DEVICE inline uint64_t sampling_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The uniform draw in [0, 1) for a sequence's sample_index-th token: 53 random bits, exactly representable.
MOESERVE_HOST_DEVICE inline double sampling_uniform(uint64_t seed, uint64_t sample_index) {
  const uint64_t bits = sampling_mix64(sampling_mix64(seed) ^ sampling_mix64(sample_index + 0x5851f42d4c957f2dull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace moeserve
