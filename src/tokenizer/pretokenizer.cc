#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace moeserve {
namespace {

// Unicode White_Space (PropList.txt), as a class body.
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string translate_whitespace_classes(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        MOESERVE_CHECK(!in_class, "pre-tokenizer pattern: \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a literal ] first
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Pretokenizer::Pretokenizer(const std::string& pattern) : pattern_(pattern) {
  const std::string translated = translate_whitespace_classes(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &error_offset, nullptr);
  MOESERVE_CHECK(code != nullptr, "pre-tokenizer pattern does not compile at offset {}: {}", error_offset,
                 pcre2_message(error));
  const int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  if (jit != 0) {
    pcre2_code_free(code);
    fail("pre-tokenizer pattern: PCRE2 JIT compilation failed: {}", pcre2_message(jit));
  }
  code_ = code;
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Pretokenizer::Matcher::Matcher(const Pretokenizer& owner, std::string_view text)
    : owner_(owner),
      text_(text),
      match_data_(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(owner.code_), nullptr)) {
  MOESERVE_CHECK(match_data_ != nullptr, "pre-tokenizer: out of memory for match data");
}

Pretokenizer::Matcher::~Matcher() { pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_)); }

bool Pretokenizer::Matcher::next(std::string_view& piece) {
  if (offset_ >= text_.size()) return false;
  auto* data = static_cast<pcre2_match_data*>(match_data_);
  const int rc = pcre2_jit_match(static_cast<pcre2_code*>(owner_.code_), reinterpret_cast<PCRE2_SPTR>(text_.data()),
                                 text_.size(), offset_, 0, data, nullptr);
  MOESERVE_CHECK(rc >= 0, "pre-tokenizer: no piece matches at byte {} ({})", offset_,
                 rc == PCRE2_ERROR_NOMATCH ? "the pattern must match every character" : pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
  // tiktoken takes every match in order; a match that does not start here would skip text, and an empty one
  // would not advance: neither happens with a pattern that matches every character.
  MOESERVE_CHECK(ovector[0] == offset_ && ovector[1] > offset_,
                 "pre-tokenizer: the pattern left bytes {}..{} unmatched", offset_, ovector[0]);
  piece = text_.substr(offset_, ovector[1] - offset_);
  offset_ = ovector[1];
  return true;
}

}  // namespace moeserve
