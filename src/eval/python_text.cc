#include "eval/python_text.h"

#include <fmt/format.h>

#include <cstdint>

namespace moeserve::eval {
namespace {

bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Decodes the character at offset; returns its length (0 for a byte that does not start a valid character).
size_t decode_at(std::string_view text, size_t offset, uint32_t& c) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[offset + i]); };
  const uint8_t b0 = byte(0);
  size_t length = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || offset + length > text.size()) return 0;
  c = length == 1 ? b0 : b0 & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    c = (c << 6) | (byte(i) & 0x3F);
  }
  return length;
}

// The length of the whitespace character that ends at offset `end`, or 0.
size_t python_space_before(std::string_view text, size_t end) {
  for (size_t length = 1; length <= 3 && length <= end; ++length) {
    if (python_space_at(text, end - length) == length) return length;
  }
  return 0;
}

// The first code point of each run of ten Unicode decimal digits (general category Nd, Unicode 14.0: 66 runs,
// every Nd character is in one, listed by Python's unicodedata).
constexpr uint32_t kDigitZeros[] = {
    0x30,    0x660,   0x6f0,   0x7c0,   0x966,   0x9e6,   0xa66,   0xae6,   0xb66,   0xbe6,   0xc66,
    0xce6,   0xd66,   0xde6,   0xe50,   0xed0,   0xf20,   0x1040,  0x1090,  0x17e0,  0x1810,  0x1946,
    0x19d0,  0x1a80,  0x1a90,  0x1b50,  0x1bb0,  0x1c40,  0x1c50,  0xa620,  0xa8d0,  0xa900,  0xa9d0,
    0xa9f0,  0xaa50,  0xabf0,  0xff10,  0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0,
    0x11450, 0x114d0, 0x11650, 0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60,
    0x16ac0, 0x16b50, 0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
};

int decimal_digit(uint32_t c) {
  for (uint32_t zero : kDigitZeros) {
    if (c >= zero && c < zero + 10) return static_cast<int>(c - zero);
  }
  return -1;
}

}  // namespace

size_t python_space_at(std::string_view text, size_t offset) {
  if (offset >= text.size()) return 0;
  uint32_t c = 0;
  const size_t length = decode_at(text, offset, c);
  return length > 0 && is_python_space(c) ? length : 0;
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (size_t n = python_space_at(text, begin)) begin += n;
  size_t end = text.size();
  while (end > begin) {
    const size_t n = python_space_before(text, end);
    if (n == 0) break;
    end -= n;
  }
  return text.substr(begin, end - begin);
}

bool PythonWords::next(std::string_view& word) {
  while (size_t n = python_space_at(text_, offset_)) offset_ += n;
  if (offset_ >= text_.size()) return false;
  const size_t begin = offset_;
  while (offset_ < text_.size() && python_space_at(text_, offset_) == 0) ++offset_;
  word = text_.substr(begin, offset_ - begin);
  return true;
}

std::vector<std::string_view> python_split(std::string_view text) {
  std::vector<std::string_view> words;
  PythonWords reader(text);
  for (std::string_view word; reader.next(word);) words.push_back(word);
  return words;
}

std::vector<std::string_view> python_split(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (size_t found; (found = text.find(separator, begin)) != std::string_view::npos; begin = found + separator.size()) {
    parts.push_back(text.substr(begin, found - begin));
  }
  parts.push_back(text.substr(begin));
  return parts;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t begin = 0;
  for (size_t found; (found = text.find(from, begin)) != std::string_view::npos; begin = found + from.size()) {
    out.append(text.substr(begin, found - begin));
    out.append(to);
  }
  out.append(text.substr(begin));
  return out;
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::optional<long long> python_int(std::string_view text) {
  text = python_strip(text);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  unsigned long long value = 0;
  bool last_was_digit = false;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '_') {
      if (!last_was_digit) return std::nullopt;
      last_was_digit = false;
      ++i;
      continue;
    }
    uint32_t c = 0;
    const size_t length = decode_at(text, i, c);
    const int digit = length > 0 ? decimal_digit(c) : -1;
    if (digit < 0 || value > (static_cast<unsigned long long>(INT64_MAX) - static_cast<unsigned>(digit)) / 10) {
      return std::nullopt;
    }
    value = value * 10 + static_cast<unsigned>(digit);
    last_was_digit = true;
    i += length;
  }
  if (!last_was_digit) return std::nullopt;
  return negative ? -static_cast<long long>(value) : static_cast<long long>(value);
}

std::string python_float_text(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string ascii_upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

}  // namespace moeserve::eval
