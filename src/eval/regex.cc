#include "eval/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "util/error.h"

namespace moeserve::eval {
namespace {

pcre2_code* as_code(void* code) { return static_cast<pcre2_code*>(code); }

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

// The offset just past the character that starts at offset (one byte for bytes that cannot start one).
size_t next_character(std::string_view text, size_t offset) {
  ++offset;
  while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
  return offset;
}

}  // namespace

std::string_view RegexMatch::group(size_t i) const {
  if (!matched(i)) return {};
  const auto& [b, e] = *groups[i];
  return text.substr(b, e - b);
}

Regex::Regex(std::string_view pattern, unsigned flags) : pattern_(pattern) {
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (flags & kIgnoreCase) options |= PCRE2_CASELESS;
  if (flags & kDotAll) options |= PCRE2_DOTALL;
  if (flags & kMultiLine) options |= PCRE2_MULTILINE;
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // Python's `.`, `^` and `$` know only "\n"
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), options, &error,
                        &error_offset, context);
  pcre2_compile_context_free(context);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("regex \"{}\" does not compile at offset {}: {}", pattern_, error_offset, reinterpret_cast<char*>(message));
  }
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

std::optional<RegexMatch> Regex::run(std::string_view text, size_t start, bool anchored) const {
  if (start > text.size()) return std::nullopt;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  const int rc = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             anchored ? PCRE2_ANCHORED : 0, data.get(), nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
  // Resource limits (catastrophic backtracking) count as no match, as a scorer that gave up would.
  if (rc < 0) return std::nullopt;
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
  const uint32_t pairs = pcre2_get_ovector_count(data.get());
  RegexMatch m;
  m.text = text;
  m.begin = ovector[0];
  m.end = ovector[1];
  for (uint32_t i = 0; i < pairs; ++i) {
    if (ovector[2 * i] == PCRE2_UNSET) {
      m.groups.emplace_back(std::nullopt);
    } else {
      m.groups.emplace_back(std::make_pair(static_cast<size_t>(ovector[2 * i]), static_cast<size_t>(ovector[2 * i + 1])));
    }
  }
  return m;
}

std::optional<RegexMatch> Regex::search(std::string_view text, size_t start) const { return run(text, start, false); }

std::optional<RegexMatch> Regex::match(std::string_view text) const { return run(text, 0, true); }

std::vector<RegexMatch> Regex::find_all(std::string_view text) const {
  std::vector<RegexMatch> matches;
  size_t start = 0;
  while (start <= text.size()) {
    std::optional<RegexMatch> m = run(text, start, false);
    if (!m) break;
    start = m->end > m->begin ? m->end : next_character(text, m->end);
    matches.push_back(std::move(*m));
  }
  return matches;
}

std::optional<RegexMatch> Regex::last(std::string_view text) const {
  std::vector<RegexMatch> matches = find_all(text);
  if (matches.empty()) return std::nullopt;
  return std::move(matches.back());
}

std::string Regex::substitute(std::string_view text,
                              const std::function<std::string(const RegexMatch&)>& replacement) const {
  std::string out;
  size_t copied = 0;
  for (const RegexMatch& m : find_all(text)) {
    out.append(text.substr(copied, m.begin - copied));
    out += replacement(m);
    copied = m.end;
  }
  out.append(text.substr(copied));
  return out;
}

std::string Regex::substitute(std::string_view text, std::string_view replacement_template) const {
  return substitute(text, [&](const RegexMatch& m) {
    std::string out;
    for (size_t i = 0; i < replacement_template.size(); ++i) {
      const char c = replacement_template[i];
      if (c == '\\' && i + 1 < replacement_template.size() && replacement_template[i + 1] >= '1' &&
          replacement_template[i + 1] <= '9') {
        out.append(m.group(static_cast<size_t>(replacement_template[++i] - '0')));
      } else {
        out.push_back(c);
      }
    }
    return out;
  });
}

}  // namespace moeserve::eval
