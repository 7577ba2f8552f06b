// UTF-8 well-formedness as the Unicode Standard defines it (chapter 3, table 3-7), and the replacement of
// ill-formed bytes by U+FFFD one "maximal subpart" at a time (the practice Unicode recommends, which Rust's
// String::from_utf8_lossy and Python's errors="replace" follow, and so harmony's streaming parser).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moeserve {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

struct Utf8Step {
  enum Status { valid, invalid, incomplete };
  Status status;
  // valid: bytes in the character; invalid: bytes of the maximal subpart that one U+FFFD replaces;
  // incomplete: bytes present of a sequence that more bytes could still complete.
  size_t length;
};

// Classifies the sequence that starts at text[0] (text must not be empty).
Utf8Step utf8_step(std::string_view text);

// The offset of the first byte that is not part of a well-formed UTF-8 sequence (a truncated final sequence
// counts as ill-formed), or std::string_view::npos when text is well-formed.
size_t find_invalid_utf8(std::string_view text);

// text with each maximal ill-formed subpart, and a truncated final sequence, replaced by U+FFFD.
std::string utf8_lossy(std::string_view text);

}  // namespace moeserve
