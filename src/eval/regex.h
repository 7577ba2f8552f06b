// Regular expressions with Python's `re` semantics for the patterns the reference scorers use (MLPerf's
// eval_accuracy.py and lcb_runner are Python): PCRE2 with UTF and Unicode properties, so \b, \w and \s and
// case-insensitive classes see Unicode as Python 3 str patterns do; `$` matches at the end or before a final
// newline, `.` stops at "\n" unless dot_all. Text that is not valid UTF-8 is matched as far as it is valid
// (PCRE2_MATCH_INVALID_UTF), never an error: model output can be anything.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeserve::eval {

struct RegexMatch {
  std::string_view text;  // the whole subject
  size_t begin = 0;
  size_t end = 0;
  std::vector<std::optional<std::pair<size_t, size_t>>> groups;  // [0] is the whole match

  std::string_view whole() const { return text.substr(begin, end - begin); }
  // The text of group i; empty when the group did not take part in the match.
  std::string_view group(size_t i) const;
  bool matched(size_t i) const { return i < groups.size() && groups[i].has_value(); }
};

class Regex {
 public:
  enum Flag : unsigned { kIgnoreCase = 1, kDotAll = 2, kMultiLine = 4 };

  // An invalid pattern is an Error naming it (patterns are program constants, so this is a programming error
  // that tests catch).
  explicit Regex(std::string_view pattern, unsigned flags = 0);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // re.search: the first match at or after byte offset start.
  std::optional<RegexMatch> search(std::string_view text, size_t start = 0) const;
  // re.match: a match that begins at offset 0.
  std::optional<RegexMatch> match(std::string_view text) const;
  // re.finditer: non-overlapping matches, left to right.
  std::vector<RegexMatch> find_all(std::string_view text) const;
  std::optional<RegexMatch> last(std::string_view text) const;
  // re.sub with a function: every match replaced by replacement(match).
  std::string substitute(std::string_view text, const std::function<std::string(const RegexMatch&)>& replacement) const;
  // re.sub with a template in which \1..\9 stand for groups.
  std::string substitute(std::string_view text, std::string_view replacement_template) const;

 private:
  std::optional<RegexMatch> run(std::string_view text, size_t start, bool anchored) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace moeserve::eval
