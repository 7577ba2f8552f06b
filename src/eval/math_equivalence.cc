#include "eval/math_equivalence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "eval/math_expression.h"
#include "eval/python_text.h"
#include "eval/regex.h"

namespace moeserve::eval {
namespace {

// Where the Python reference raises an exception inside normalize_answer (which then returns its input).
struct NormalizeFailure {};

// The UTF-8 character that starts text (Python's s[0]); empty for empty text.
std::string_view first_character(std::string_view text) {
  if (text.empty()) return {};
  size_t length = 1;
  while (length < text.size() && (static_cast<unsigned char>(text[length]) & 0xC0) == 0x80) ++length;
  return text.substr(0, length);
}

std::string_view last_character(std::string_view text) {
  if (text.empty()) return {};
  size_t begin = text.size() - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  return text.substr(begin);
}

size_t character_count(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::optional<std::string> unwrap_text_macro(std::string_view answer) {
  static const Regex text_macro("^\\\\text\\{(.+?)\\}$");
  if (auto m = text_macro.search(answer)) return std::string(m->group(1));
  return std::nullopt;
}

// ---- Hendrycks MATH (math_normalize.py) ------------------------------------------------------------------------

std::string fix_fracs(const std::string& string) {
  const std::vector<std::string_view> parts = python_split(string, "\\frac");
  std::string out(parts[0]);
  for (size_t p = 1; p < parts.size(); ++p) {
    const std::string_view part = parts[p];
    out += "\\frac";
    if (part.empty()) throw NormalizeFailure{};  // substr[0] on an empty string
    if (part[0] == '{') {
      out += part;
      continue;
    }
    if (character_count(part) < 2) return string;
    const std::string_view a = first_character(part);
    const std::string_view b = first_character(part.substr(a.size()));
    const std::string_view rest = part.substr(a.size() + b.size());
    out += b != "{" ? fmt::format("{{{}}}{{{}}}{}", a, b, rest) : fmt::format("{{{}}}{}{}", a, b, rest);
  }
  return out;
}

bool is_canonical_int(std::string_view text) {
  static const Regex canonical("^(?:0|-?[1-9][0-9]*)\\z");
  return canonical.match(text).has_value();
}

std::string fix_a_slash_b(const std::string& string) {
  const std::vector<std::string_view> parts = python_split(string, "/");
  if (parts.size() != 2 || !is_canonical_int(parts[0]) || !is_canonical_int(parts[1])) return string;
  return fmt::format("\\frac{{{}}}{{{}}}", parts[0], parts[1]);
}

std::string remove_right_units(const std::string& string) {
  if (string.find("\\text{ ") == std::string::npos) return string;
  const std::vector<std::string_view> parts = python_split(string, "\\text{ ");
  if (parts.size() != 2) throw NormalizeFailure{};
  return std::string(parts[0]);
}

std::string fix_sqrt(const std::string& string) {
  if (string.find("\\sqrt") == std::string::npos) return string;
  const std::vector<std::string_view> parts = python_split(string, "\\sqrt");
  std::string out(parts[0]);
  for (size_t p = 1; p < parts.size(); ++p) {
    const std::string_view part = parts[p];
    if (part.empty()) throw NormalizeFailure{};
    const std::string_view a = first_character(part);
    out += a != "{" ? fmt::format("\\sqrt{{{}}}{}", a, part.substr(a.size())) : fmt::format("\\sqrt{}", part);
  }
  return out;
}

std::string strip_string(std::string s) {
  s = replace_all(s, "\n", "");
  s = replace_all(s, "\\!", "");
  s = replace_all(s, "\\\\", "\\");
  s = replace_all(replace_all(s, "tfrac", "frac"), "dfrac", "frac");
  s = replace_all(replace_all(s, "\\left", ""), "\\right", "");
  s = replace_all(replace_all(s, "^{\\circ}", ""), "^\\circ", "");
  s = replace_all(s, "\\$", "");
  s = remove_right_units(s);
  s = replace_all(s, "\\%", "");
  s = replace_all(replace_all(s, " .", " 0."), "{.", "{0.");
  if (s.empty()) return s;
  if (s[0] == '.') s = "0" + s;
  const std::vector<std::string_view> sides = python_split(s, "=");
  if (sides.size() == 2 && character_count(sides[0]) <= 2) s = std::string(sides[1]);
  s = fix_sqrt(s);
  s = replace_all(s, " ", "");
  s = fix_fracs(s);
  if (s == "0.5") s = "\\frac{1}{2}";
  return fix_a_slash_b(s);
}

// ---- PRM800K (grader.py) ---------------------------------------------------------------------------------------

// Python's float(str): optional sign, digits with single underscores between them, a fraction, an exponent,
// or inf/infinity/nan, with surrounding whitespace.
std::optional<double> python_float(std::string_view text) {
  text = python_strip(text);
  static const Regex number(
      "^[+-]?(?:(?:\\d(?:_?\\d)*)?\\.\\d(?:_?\\d)*|\\d(?:_?\\d)*\\.?)(?:[eE][+-]?\\d(?:_?\\d)*)?\\z"
      "|^[+-]?(?:inf|infinity|nan)\\z",
      Regex::kIgnoreCase);
  if (!number.match(text)) return std::nullopt;
  const std::string plain = replace_all(text, "_", "");
  return std::strtod(plain.c_str(), nullptr);
}

bool is_integer_value(double x) { return std::isfinite(x) && std::fabs(x - std::nearbyint(x)) <= 1e-7; }

// Python prints int(-0.0) as 0.
std::string integer_text(double x) { return fmt::format("{:.0f}", x == 0 ? 0.0 : x); }

std::string strip_properly_formatted_commas(std::string expr) {
  static const Regex comma("(\\d)(,)(\\d\\d\\d)($|\\D)");
  for (;;) {
    std::string next = comma.substitute(expr, "\\1\\3\\4");
    if (next == expr) return next;
    expr = std::move(next);
  }
}

bool str_is_int(std::string_view x) {
  const std::optional<double> value = python_float(strip_properly_formatted_commas(std::string(x)));
  return value && is_integer_value(*value);
}

// _str_to_int: int(float(x)) truncates toward zero.
std::string str_to_int(std::string_view x) {
  const std::optional<double> value = python_float(replace_all(x, ",", ""));
  return value ? integer_text(std::trunc(*value)) : std::string(x);
}

std::string parse_latex(std::string expr) {
  expr = replace_all(replace_all(expr, "\\tfrac", "\\frac"), "\\dfrac", "\\frac");
  expr = replace_all(expr, "\\frac", " \\frac");  // mixed numbers: 7\frac{3}{4} -> "7 3/4"
  expr = latex_to_text(expr);
  for (const auto& [from, to] : {std::pair{"√", "sqrt"}, {"π", "pi"}, {"∞", "inf"}, {"∪", "U"}, {"·", "*"}, {"×", "*"}}) {
    expr = replace_all(expr, from, to);
  }
  return std::string(python_strip(expr));
}

std::vector<std::string> split_tuple(std::string expr) {
  expr = strip_properly_formatted_commas(std::move(expr));
  if (expr.empty()) return {};
  static constexpr std::string_view kTupleChars = "()[]";
  const auto is_tuple_char = [](char c) { return kTupleChars.find(c) != std::string_view::npos; };
  const std::string_view inner = std::string_view(expr).substr(1, expr.size() >= 2 ? expr.size() - 2 : 0);
  if (expr.size() > 2 && is_tuple_char(expr.front()) && is_tuple_char(expr.back()) &&
      inner.find_first_of(kTupleChars) == std::string_view::npos) {
    std::vector<std::string> elements;
    for (std::string_view e : python_split(inner, ",")) elements.emplace_back(python_strip(e));
    return elements;
  }
  return {expr};
}

bool is_frac(std::string_view expr) {
  static const Regex frac("^-?[0-9]+.?/0*[1-9][0-9]*.?$");
  return frac.search(expr).has_value();
}

int unknown_letter_count(std::string_view expr) {
  std::string rest = replace_all(replace_all(expr, "sqrt", ""), "frac", "");
  static const Regex letter("\\p{L}");
  std::vector<std::string_view> seen;
  for (const RegexMatch& m : letter.find_all(rest)) {
    if (std::find(seen.begin(), seen.end(), m.whole()) == seen.end()) seen.push_back(m.whole());
  }
  return static_cast<int>(seen.size());
}

// should_allow_eval: at most two distinct letters, no "^{" or "^(", no stacked or multi-digit powers.
bool should_allow_eval(std::string_view expr) {
  if (unknown_letter_count(expr) > 2) return false;
  if (expr.find("^{") != std::string_view::npos || expr.find("^(") != std::string_view::npos) return false;
  static const Regex stacked("\\^[0-9]+\\^");
  static const Regex long_power("\\^[0-9][0-9]+");
  return !stacked.search(expr) && !long_power.search(expr);
}

bool equal_by_value(std::string_view ground_truth, std::string_view given) {
  const std::string expr = fmt::format("({})-({})", ground_truth, given);
  return should_allow_eval(expr) && math_equal(ground_truth, given);
}

}  // namespace

std::string normalize_mathd(std::string_view answer) {
  std::string s(python_strip(answer));
  try {
    if (std::optional<std::string> inner = unwrap_text_macro(s)) s = std::string(python_strip(*inner));
    return strip_string(s);
  } catch (const NormalizeFailure&) {
    return s;
  }
}

std::string normalize_prm800k(std::string_view answer) {
  std::string expr(answer);
  if (std::optional<std::string> inner = unwrap_text_macro(expr)) expr = *inner;
  expr = replace_all(replace_all(expr, "\\%", "%"), "\\$", "$");
  expr = replace_all(replace_all(expr, "$", ""), "%", "");
  expr = replace_all(replace_all(expr, " or ", " , "), " and ", " , ");
  expr = replace_all(replace_all(replace_all(expr, "million", "*10^6"), "billion", "*10^9"), "trillion", "*10^12");
  for (std::string_view unit : {"degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day",
                                "week", "month", "year", "foot", "feet", "inch", "yard"}) {
    expr = Regex(fmt::format("{}(es)?(s)? *(\\^[0-9]+)?", unit)).substitute(expr, "");
  }
  static const Regex degrees("\\^ *\\\\circ");
  expr = degrees.substitute(expr, "");
  if (!expr.empty() && expr.front() == '{' && expr.back() == '}') expr = expr.substr(1, expr.size() - 2);
  static const Regex thin_space(",\\\\! *");
  expr = thin_space.substitute(expr, "");
  if (std::optional<double> value = python_float(expr); value && is_integer_value(*value)) {
    expr = integer_text(std::nearbyint(*value));  // str(int(round(float(expr)))): ties to even, as round()
  }
  if (expr.find('\\') != std::string::npos) expr = parse_latex(expr);
  static const Regex minus_space("- *");
  expr = minus_space.substitute(expr, "-");
  static const Regex mixed_number("([0-9]) +([0-9])");
  expr = mixed_number.substitute(expr, "\\1+\\2");
  expr = replace_all(expr, " ", "");
  expr = replace_all(replace_all(expr, "{", ""), "}", "");
  expr = ascii_lower(expr);
  if (str_is_int(expr)) expr = str_to_int(expr);
  return expr;
}

bool math_answers_equal(std::string_view given, std::string_view ground_truth) {
  if (normalize_mathd(ground_truth) == normalize_mathd(given)) return true;
  const std::string truth = normalize_prm800k(ground_truth);
  const std::string answer = normalize_prm800k(given);
  if (truth == answer) return true;
  if (answer.empty()) return false;
  const std::vector<std::string> truth_elements = split_tuple(truth);
  const std::vector<std::string> given_elements = split_tuple(answer);
  if (truth_elements.size() > 1 &&
      (first_character(truth) != first_character(answer) || last_character(truth) != last_character(answer))) {
    return false;
  }
  if (truth_elements.size() != given_elements.size()) return false;
  for (size_t i = 0; i < truth_elements.size(); ++i) {
    const std::string& t = truth_elements[i];
    const std::string& g = given_elements[i];
    bool equal = false;
    if (is_frac(t) && is_frac(g)) {
      equal = t == g;
    } else if (str_is_int(t) != str_is_int(g)) {
      equal = false;
    } else {
      equal = equal_by_value(t, g);
    }
    if (!equal) return false;
  }
  return true;
}

bool math500_correct(const std::optional<std::string>& parsed, std::string_view ground_truth) {
  if (!parsed || parsed->empty() || ground_truth.empty()) return false;
  const std::string_view answer = python_strip(*parsed);
  return !answer.empty() && math_answers_equal(answer, ground_truth);
}

}  // namespace moeserve::eval
