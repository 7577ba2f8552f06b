// Pre-tokenisation: the split of text into pieces that BPE encodes one at a time, by tiktoken's pattern (for
// o200k: letters with an optional leading non-letter, numbers of 1-3 digits, punctuation runs, newline runs and
// whitespace, the last with a negative lookahead, which is why this is PCRE2 and not RE2). PCRE2 runs with UTF
// and Unicode properties, JIT-compiled.
//
// tiktoken's regex engine (Rust's fancy-regex and regex) reads \s as the Unicode White_Space property; PCRE2's
// \s also matches U+180E, so \s and \S are rewritten to the explicit White_Space set before compiling. The
// remaining difference is the Unicode version of the property tables (PCRE2 10.42: Unicode 14): letters and
// digits assigned after that are classed differently.
#pragma once

#include <string>
#include <string_view>

namespace moeserve {

class Pretokenizer {
 public:
  explicit Pretokenizer(const std::string& pattern);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Calls on_piece(std::string_view) for each match in order. text must be valid UTF-8 (the caller checks once
  // for the whole input); the pattern matches every character, so the pieces tile the text.
  template <typename OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const {
    Matcher matcher(*this, text);
    std::string_view piece;
    while (matcher.next(piece)) on_piece(piece);
  }

 private:
  class Matcher {
   public:
    Matcher(const Pretokenizer& owner, std::string_view text);
    ~Matcher();
    bool next(std::string_view& piece);

   private:
    const Pretokenizer& owner_;
    std::string_view text_;
    size_t offset_ = 0;
    void* match_data_;
  };

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

// The pattern with \s and \S spelled as Unicode White_Space (see above).
std::string translate_whitespace_classes(std::string_view pattern);

}  // namespace moeserve
