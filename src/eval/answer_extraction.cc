#include "eval/answer_extraction.h"

#include <fmt/format.h>


#include "eval/python_text.h"
#include "eval/regex.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

// The artefact clean-up both references apply before matching letters: a ['...'] wrapper is removed and the
// two-character sequences \n and \' become a newline and a quote.
std::string clean_artifacts(std::string_view text) {
  std::string s(text);
  const bool wrapped = (s.starts_with("['") || s.starts_with("[\"")) && (s.ends_with("']") || s.ends_with("\"]"));
  if (wrapped) s = s.size() >= 4 ? std::string(python_strip(std::string_view(s).substr(2, s.size() - 4))) : "";
  return replace_all(replace_all(s, "\\n", "\n"), "\\'", "'");
}

std::optional<char> upper_letter(const std::optional<RegexMatch>& m) {
  if (!m) return std::nullopt;
  return ascii_upper(m->group(1)).front();
}

std::optional<char> last_answer_marker(std::string_view text, char max_option) {
  const Regex pattern(fmt::format("\\b(?:ANSWER|FINAL\\s*ANSWER)\\b\\s*[:=]?\\s*(?:\\(?\\s*([A-{0}])\\s*\\)?)"
                                  "(?:\\s*$|[^A-Za-z])",
                                  max_option),
                      Regex::kIgnoreCase);
  return upper_letter(pattern.last(text));
}

std::optional<char> last_standalone_letter(std::string_view text, char max_option) {
  const Regex pattern(fmt::format("\\b([A-{}])\\b", max_option), Regex::kIgnoreCase);
  return upper_letter(pattern.last(text));
}

}  // namespace

std::string_view rules_name(Rules rules) { return rules == Rules::gpt_oss ? "gpt-oss" : "deepseek-r1"; }

Rules parse_rules(std::string_view name) {
  if (name == "gpt-oss" || name == "gpt-oss-120b") return Rules::gpt_oss;
  if (name == "deepseek-r1") return Rules::deepseek_r1;
  fail("unknown scoring rules \"{}\": expected gpt-oss or deepseek-r1", name);
}

std::string final_section(std::string_view text) {
  text = python_strip(text);
  static const Regex pattern("<\\|channel\\|>final[^<]*<\\|message\\|>(.*?)(?:<\\|return\\|>|$)", Regex::kDotAll);
  if (auto m = pattern.search(text)) return std::string(python_strip(m->group(1)));
  return std::string(text);
}

std::string strip_markdown_bold(std::string_view text) {
  static const Regex bold("\\*\\*([^*]+)\\*\\*");
  return bold.substitute(text, "\\1");
}

std::optional<int> parse_aime_answer(std::string_view text) {
  text = python_strip(text);
  static const Regex boxed("\\\\boxed\\{\\s*(\\d+)\\s*\\}");
  static const Regex answer("Answer:\\s*(\\d+)(?!\\.)\\b", Regex::kIgnoreCase | Regex::kMultiLine);
  std::optional<RegexMatch> m = boxed.last(text);
  if (!m) m = answer.last(text);
  if (!m) return std::nullopt;
  const std::optional<long long> value = python_int(m->group(1));
  if (!value || *value < 0 || *value > 999) return std::nullopt;
  return static_cast<int>(*value);
}

bool aime_correct(std::optional<int> parsed, std::string_view ground_truth) {
  const std::optional<long long> truth = python_int(ground_truth);
  return parsed && truth && *parsed == *truth;
}

std::optional<char> parse_multiple_choice(std::string_view text, char max_option, Rules rules) {
  MOESERVE_CHECK(max_option >= 'A' && max_option <= 'Z', "multiple choice: bad last option '{}'", max_option);
  text = python_strip(text);
  if (text.empty()) return std::nullopt;
  if (rules == Rules::deepseek_r1) {
    const std::string cleaned = clean_artifacts(text);
    if (auto letter = last_answer_marker(cleaned, max_option)) return letter;
    if (max_option == 'J') return last_standalone_letter(cleaned, max_option);
    return std::nullopt;
  }
  const std::string section = clean_artifacts(strip_markdown_bold(final_section(text)));
  const Regex leading(fmt::format("^[^a-zA-Z]*([A-{}])(?:[^a-zA-Z]|$)", max_option), Regex::kIgnoreCase);
  if (auto letter = upper_letter(leading.match(python_strip(section)))) return letter;
  const Regex answer(fmt::format("\\b(?:Answer|ANSWER)\\s*[:.]?\\s*([A-{}])\\b", max_option), Regex::kIgnoreCase);
  if (auto letter = upper_letter(answer.search(section))) return letter;
  const std::string full_text = replace_all(replace_all(text, "\\n", "\n"), "\\'", "'");
  if (auto letter = last_answer_marker(full_text, max_option)) return letter;
  if (max_option == 'J') return last_standalone_letter(section, max_option);
  return std::nullopt;
}

bool multiple_choice_correct(std::optional<char> parsed, std::string_view ground_truth, char max_option) {
  if (!parsed) return false;
  const std::string truth = ascii_upper(ground_truth);
  const char letter = ascii_upper(std::string(1, *parsed)).front();
  return letter >= 'A' && letter <= max_option && truth.size() == 1 && truth.front() == letter;
}

std::optional<std::string> parse_boxed(std::string_view text) {
  text = python_strip(text);
  static constexpr std::string_view kBoxed = "\\boxed{";
  const size_t at = text.rfind(kBoxed);
  if (at == std::string_view::npos) return std::nullopt;
  const size_t content = at + kBoxed.size();
  int depth = 0;
  for (size_t i = content; i < text.size(); ++i) {
    if (text[i] == '{') {
      ++depth;
    } else if (text[i] == '}') {
      if (depth == 0) return std::string(python_strip(text.substr(content, i - content)));
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace moeserve::eval
