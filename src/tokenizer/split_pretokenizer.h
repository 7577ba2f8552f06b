// Hugging Face tokenizers' pre-tokenizer Sequence of Split steps (behavior Isolated, invert false), as DeepSeek-V3's
// tokenizer.json has three: each step cuts every piece of the step before into its matches and the text between
// them, all kept in order; a piece is matched on its own (a lookahead does not see past its end). Then ByteLevel
// (use_regex false) only maps the bytes.
//
// The patterns run on PCRE2 with UTF and Unicode properties, JIT-compiled. \s and \S are rewritten to Unicode
// White_Space, which is what Hugging Face tokenizers' regex engine (Oniguruma) matches: U+0009-000D, U+0085 and
// the separators Zs, Zl, Zp (doc/RE of kkos/oniguruma). JavaScript's \s differs (no U+0085, and U+FEFF).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moeserve {

class SplitPretokenizer {
 public:
  explicit SplitPretokenizer(std::vector<std::string> patterns);
  ~SplitPretokenizer();
  SplitPretokenizer(const SplitPretokenizer&) = delete;
  SplitPretokenizer& operator=(const SplitPretokenizer&) = delete;

  const std::vector<std::string>& patterns() const { return patterns_; }

  // Calls on_piece(std::string_view) for each non-empty piece in order; the pieces tile the text. text must be
  // valid UTF-8 (the caller checks once).
  template <typename OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const {
    split_step(0, text, on_piece);
  }

 private:
  void free_codes();
  // [start, end) of the first match at or after `from` in text, false when there is none.
  bool find(size_t step, std::string_view text, size_t from, size_t& start, size_t& end) const;

  template <typename OnPiece>
  void split_step(size_t step, std::string_view text, OnPiece& on_piece) const {
    if (text.empty()) return;
    if (step == codes_.size()) {
      on_piece(text);
      return;
    }
    size_t at = 0, start = 0, end = 0;
    while (at < text.size() && find(step, text, at, start, end)) {
      split_step(step + 1, text.substr(at, start - at), on_piece);
      split_step(step + 1, text.substr(start, end - start), on_piece);
      at = end;
    }
    split_step(step + 1, text.substr(at), on_piece);
  }

  std::vector<std::string> patterns_;
  std::vector<void*> codes_;  // pcre2_code_8, one per step
};

}  // namespace moeserve
