// The deterministic random values of make-tiny's checkpoints (the GPT-OSS tiny model and its EAGLE-3 draft head):
// every tensor element is a hash of (seed, tensor name, index), turned into a value with integer and exactly
// rounded float arithmetic only, so the bytes are the same on every IEEE machine and libm.
// A file that includes this must be compiled with -ffp-contract=off: a fused multiply-add in mean + std * x
// would round differently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/bfloat16.h"
#include "util/thread_pool.h"

namespace moeserve::tiny_random {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t name_key(uint64_t seed, const std::string& name) {
  uint64_t h = splitmix64(seed);
  for (unsigned char ch : name) h = splitmix64(h ^ ch);
  return h;
}

// Element i of a tensor: a 64-bit hash, independent of generation order (so tensors fill in parallel).
inline uint64_t element_bits(uint64_t key, uint64_t i) { return splitmix64(key ^ splitmix64(i)); }

// Approximately standard normal (Irwin-Hall of four uniforms, variance 1).
inline float element_normal(uint64_t bits) {
  float sum = 0.0f;
  for (int j = 0; j < 4; ++j) sum += static_cast<float>((bits >> (16 * j)) & 0xffff) * (1.0f / 65536.0f);
  return (sum - 2.0f) * 1.7320508f;
}

// n bf16 values mean + std * normal, keyed by `name`, as little-endian bytes.
inline std::vector<uint8_t> bf16_normal(ThreadPool& pool, uint64_t seed, const std::string& name, int64_t n,
                                        float mean, float std) {
  std::vector<uint8_t> bytes(n * 2);
  auto* out = reinterpret_cast<uint16_t*>(bytes.data());
  uint64_t key = name_key(seed, name);
  pool.parallel_for(n, 1 << 16, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = float_to_bf16(mean + std * element_normal(element_bits(key, i)));
  });
  return bytes;
}

}  // namespace moeserve::tiny_random
