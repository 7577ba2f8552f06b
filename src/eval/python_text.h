// Python's str methods that the reference scorers rely on, over UTF-8: strip() and split() know Python's
// whitespace (str.isspace: ASCII whitespace, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000); lower()/upper() change ASCII letters only (the answers compared are ASCII).
// Unicode data as of Python 3.11 and PCRE2 10.42: Unicode 14.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::eval {

// The length in bytes of the Python whitespace character at text[offset], or 0 when there is none.
size_t python_space_at(std::string_view text, size_t offset);

std::string_view python_strip(std::string_view text);                   // str.strip()
std::vector<std::string_view> python_split(std::string_view text);      // str.split()

// str.split() one word at a time, for text too large to hold its words.
class PythonWords {
 public:
  explicit PythonWords(std::string_view text) : text_(text) {}
  // The next word, or false at the end.
  bool next(std::string_view& word);

 private:
  std::string_view text_;
  size_t offset_ = 0;
};
std::vector<std::string_view> python_split(std::string_view text, std::string_view separator);  // str.split(sep)
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);  // str.replace
std::string ascii_lower(std::string_view text);
// int(text) for decimal text: surrounding whitespace, a sign, digits of any script (Unicode Nd, as Python's
// int() reads "\uff13\uff13" as 33) with single underscores between them. None when it is not one, or does not
// fit in 64 bits.
std::optional<long long> python_int(std::string_view text);
// str(float) / repr(float): the shortest digits that read back the same, ".0" added to whole numbers.
std::string python_float_text(double value);
std::string ascii_upper(std::string_view text);

}  // namespace moeserve::eval
