#include "tokenizer/rank_table.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "util/error.h"

namespace moeserve {
namespace {

inline uint64_t mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

}  // namespace

uint64_t RankTable::hash(std::string_view bytes) {
  uint64_t h = 0x9e3779b97f4a7c15ull * (bytes.size() + 1);
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    h = mix(h ^ word) + 0x632be59bd9b4e019ull;
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  if (n > 0) std::memcpy(&tail, p, n);
  return mix(h ^ tail);
}

RankTable::RankTable(const std::vector<std::string>& tokens) {
  size_t total = 0;
  for (const auto& t : tokens) total += t.size();
  MOESERVE_CHECK(total < UINT32_MAX, "rank table: {} bytes of tokens is too many", total);
  arena_.reserve(total);
  offsets_.reserve(tokens.size() + 1);
  offsets_.push_back(0);
  for (const auto& t : tokens) {
    arena_ += t;
    offsets_.push_back(static_cast<uint32_t>(arena_.size()));
  }
  end_masks_.assign(1 << 16, {});
  const size_t capacity = std::bit_ceil(tokens.size() * 2 + 16);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (size_t r = 0; r < tokens.size(); ++r) {
    MOESERVE_CHECK(!tokens[r].empty(), "rank table: the token of rank {} is empty", r);
    const TokenId existing = find(tokens[r]);
    MOESERVE_CHECK(existing == kNoRank, "rank table: the token of rank {} repeats rank {}", r, existing);
    const uint64_t h = hash(tokens[r]);
    size_t slot = h & mask_;
    while (slots_[slot].tag != 0) slot = (slot + 1) & mask_;
    slots_[slot] = {prefix(tokens[r]), make_tag(h, tokens[r].size()), static_cast<uint32_t>(r)};
    const size_t length = tokens[r].size();
    longest_ = std::max(longest_, length);
    MOESERVE_CHECK(length <= UINT16_MAX, "rank table: the token of rank {} has {} bytes (at most {})", r, length,
                   UINT16_MAX);
    if (length >= 2 && length <= kMaskedLengths) {
      LengthMask& mask = end_masks_[static_cast<size_t>(static_cast<uint8_t>(tokens[r][length - 2])) << 8 |
                                    static_cast<uint8_t>(tokens[r][length - 1])];
      mask[(length - 1) / 64] |= uint64_t{1} << ((length - 1) % 64);
    }
  }
}

}  // namespace moeserve
