// The mergeable ranks of a byte-level BPE: token bytes <-> rank (the rank is the token id). One open-addressing
// hash table over a single byte arena; the BPE merge loop looks a byte range up in it several times per piece,
// so a slot carries the token's length and first 8 bytes: most look-ups touch one cache line.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve {

using TokenId = int32_t;

class RankTable {
 public:
  static constexpr TokenId kNoRank = INT32_MAX;

  RankTable() = default;
  // tokens[r] is the byte string of rank r; every string must be distinct and non-empty (checked by loaders).
  explicit RankTable(const std::vector<std::string>& tokens);

  // The rank of these exact bytes, or kNoRank.
  TokenId find(std::string_view bytes) const {
    if (bytes.empty()) return kNoRank;
    const uint64_t h = hash(bytes);
    const uint32_t tag = make_tag(h, bytes.size());
    const uint64_t head = prefix(bytes);
    for (size_t slot = h & mask_;; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.tag == 0) return kNoRank;
      if (s.tag != tag || s.head != head) continue;
      // The tag holds the length (up to 63) and head the first 8 bytes: short tokens need no other memory.
      if (bytes.size() <= 8 || token(static_cast<TokenId>(s.rank)) == bytes) return static_cast<TokenId>(s.rank);
    }
  }

  std::string_view token(TokenId rank) const {
    return {arena_.data() + offsets_[rank], offsets_[rank + 1] - offsets_[rank]};
  }
  size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  size_t longest_token() const { return longest_; }
  // The lengths (2..kMaskedLengths) of the tokens that end in these two bytes, as bits (bit length - 1): the BPE
  // of long pieces looks up only those lengths.
  static constexpr size_t kMaskedLengths = 128;
  using LengthMask = std::array<uint64_t, kMaskedLengths / 64>;
  const LengthMask& lengths_ending_in(char second_last, char last) const {
    return end_masks_[static_cast<size_t>(static_cast<uint8_t>(second_last)) << 8 | static_cast<uint8_t>(last)];
  }

  static uint64_t hash(std::string_view bytes);

 private:
  struct Slot {
    uint64_t head = 0;  // the first 8 bytes, zero-padded
    uint32_t tag = 0;   // 0: empty; else hash bits and the length
    uint32_t rank = 0;
  };
  static uint32_t make_tag(uint64_t hash, size_t length) {
    return (static_cast<uint32_t>(hash >> 32) & ~63u) | static_cast<uint32_t>(length < 63 ? length : 63);
  }
  static uint64_t prefix(std::string_view bytes) {
    uint64_t head = 0;
    std::memcpy(&head, bytes.data(), bytes.size() < 8 ? bytes.size() : 8);
    return head;
  }
  std::string arena_;
  std::vector<uint32_t> offsets_;  // token r is arena_[offsets_[r], offsets_[r + 1])
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t longest_ = 0;
  std::vector<LengthMask> end_masks_;  // by the last two bytes
};

}  // namespace moeserve
