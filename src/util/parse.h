// Whole-string number parsing for command-line values: nullopt unless all of `text` is the number.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace moeserve {

inline std::optional<double> parse_double_prefix(std::string_view text, size_t& used) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  used = static_cast<size_t>(end - text.data());
  return value;
}

inline std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace moeserve
