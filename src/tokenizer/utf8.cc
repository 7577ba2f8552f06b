#include "tokenizer/utf8.h"

#include <cstdint>
#include <cstring>

namespace moeserve {
namespace {

// The allowed range of the second byte for each lead byte (table 3-7); later continuation bytes are 80..BF.
struct LeadInfo {
  uint8_t length;  // 0 for bytes that cannot start a sequence
  uint8_t second_low, second_high;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

Utf8Step utf8_step(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const LeadInfo lead = lead_info(p[0]);
  if (lead.length == 0) return {Utf8Step::invalid, 1};
  for (size_t i = 1; i < lead.length; ++i) {
    if (i == text.size()) return {Utf8Step::incomplete, i};
    const uint8_t low = i == 1 ? lead.second_low : 0x80;
    const uint8_t high = i == 1 ? lead.second_high : 0xBF;
    if (p[i] < low || p[i] > high) return {Utf8Step::invalid, i};
  }
  return {Utf8Step::valid, lead.length};
}

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs eight bytes at a time: most text is mostly ASCII.
    while (i + 8 <= text.size()) {
      uint64_t word;
      std::memcpy(&word, text.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i == text.size()) break;
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = utf8_step(text.substr(i));
    if (step.status != Utf8Step::valid) return i;
    i += step.length;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step step = utf8_step(text.substr(i));
    if (step.status == Utf8Step::valid) {
      out.append(text.substr(i, step.length));
    } else {
      out.append(kReplacementCharacter);
    }
    i += step.length;
  }
  return out;
}

}  // namespace moeserve
