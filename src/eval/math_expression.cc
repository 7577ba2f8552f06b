#include "eval/math_expression.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numbers>

#include "eval/python_text.h"

namespace moeserve::eval {
namespace {

// ---- LaTeX to text -------------------------------------------------------------------------------------------

const std::map<std::string, std::string, std::less<>>& symbol_macros() {
  static const std::map<std::string, std::string, std::less<>> table = {
      {"alpha", "α"},    {"beta", "β"},     {"gamma", "γ"},    {"delta", "δ"},    {"epsilon", "ϵ"},
      {"varepsilon", "ε"}, {"zeta", "ζ"},   {"eta", "η"},      {"theta", "θ"},    {"iota", "ι"},
      {"kappa", "κ"},    {"lambda", "λ"},   {"mu", "μ"},       {"nu", "ν"},       {"xi", "ξ"},
      {"pi", "π"},       {"rho", "ρ"},      {"sigma", "σ"},    {"tau", "τ"},      {"upsilon", "υ"},
      {"phi", "ϕ"},      {"varphi", "φ"},   {"chi", "χ"},      {"psi", "ψ"},      {"omega", "ω"},
      {"Gamma", "Γ"},    {"Delta", "Δ"},    {"Theta", "Θ"},    {"Lambda", "Λ"},   {"Pi", "Π"},
      {"Sigma", "Σ"},    {"Phi", "Φ"},      {"Omega", "Ω"},    {"infty", "∞"},    {"cup", "∪"},
      {"cap", "∩"},      {"cdot", "·"},     {"times", "×"},    {"pm", "±"},       {"mp", "∓"},
      {"le", "≤"},       {"leq", "≤"},      {"ge", "≥"},       {"geq", "≥"},      {"neq", "≠"},
      {"circ", "∘"},     {"in", "∈"},       {"to", "→"},       {"rightarrow", "→"}, {"ldots", "…"},
      {"dots", "…"},     {"cdots", "⋯"},    {"prime", "'"},    {"sin", "sin"},    {"cos", "cos"},
      {"tan", "tan"},    {"sec", "sec"},    {"csc", "csc"},    {"cot", "cot"},    {"arcsin", "arcsin"},
      {"arccos", "arccos"}, {"arctan", "arctan"}, {"ln", "ln"}, {"log", "log"},  {"exp", "exp"},
      {"max", "max"},    {"min", "min"},    {"lim", "lim"},    {"gcd", "gcd"},    {"deg", "deg"},
      {",", " "},        {";", " "},        {":", " "},        {" ", " "},        {"!", ""},
      {"quad", "  "},    {"qquad", "    "}, {"\\", "\n"},      {"{", "{"},        {"}", "}"},
      {"%", "%"},        {"$", "$"},        {"&", "&"},        {"#", "#"},        {"_", "_"},
  };
  return table;
}

bool is_text_macro(std::string_view name) {
  static constexpr std::array<std::string_view, 11> names = {"text",   "textrm", "textbf", "textit", "emph", "mathrm",
                                                             "mathbf", "mathit", "mathbb", "mbox",   "operatorname"};
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

class LatexToText {
 public:
  explicit LatexToText(std::string_view latex) : s_(latex) {}

  std::string run() { return sequence(false); }

 private:
  bool at_end() const { return i_ >= s_.size(); }

  // Text up to the end, or up to the closing brace of the group being read (consumed).
  std::string sequence(bool in_group) {
    std::string out;
    while (!at_end()) {
      const char c = s_[i_];
      if (c == '}') {
        ++i_;
        if (in_group) return out;
      } else if (c == '{') {
        ++i_;
        out += sequence(true);
      } else if (c == '\\') {
        out += macro();
      } else if (c == '$') {
        ++i_;
      } else if (c == '%') {  // a comment, to the end of the line
        while (!at_end() && s_[i_] != '\n') ++i_;
      } else if (c == '~') {
        ++i_;
        out += "\u00a0";
      } else {
        out.push_back(c);
        ++i_;
      }
    }
    return out;
  }

  // One macro argument: a braced group, a macro, or one character.
  std::string argument() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
    if (at_end()) return {};
    if (s_[i_] == '{') {
      ++i_;
      return sequence(true);
    }
    if (s_[i_] == '\\') return macro();
    size_t length = 1;
    while (i_ + length < s_.size() && (static_cast<unsigned char>(s_[i_ + length]) & 0xC0) == 0x80) ++length;
    std::string one(s_.substr(i_, length));
    i_ += length;
    return one;
  }

  std::string macro() {
    ++i_;  // the backslash
    if (at_end()) return {};
    size_t begin = i_;
    if (std::isalpha(static_cast<unsigned char>(s_[i_]))) {
      while (!at_end() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    } else {
      ++i_;
    }
    const std::string_view name = s_.substr(begin, i_ - begin);
    if (name == "frac" || name == "nicefrac" || name == "tfrac" || name == "dfrac") {
      std::string numerator = argument();
      return numerator + "/" + argument();
    }
    if (name == "sqrt") {
      if (!at_end() && s_[i_] == '[') {
        const size_t close = s_.find(']', i_);
        i_ = close == std::string_view::npos ? s_.size() : close + 1;
      }
      return "√(" + argument() + ")";
    }
    if (is_text_macro(name)) return argument();
    auto it = symbol_macros().find(name);
    return it == symbol_macros().end() ? std::string() : it->second;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// ---- Expressions ---------------------------------------------------------------------------------------------

// The value a variable takes at trial point 0, 1 or 2: fixed by its name, so both sides of a comparison agree,
// and different for different names at every point but by a rare coincidence.
double variable_value(std::string_view name, int point) {
  static constexpr std::array<double, 3> base = {0.7853981, 1.3247179, 2.2360679};
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  const uint64_t step = (h >> 8) * static_cast<uint64_t>(point + 7) % 997;
  return base[static_cast<size_t>(point) % 3] + 0.00731 * static_cast<double>(step);
}

// A recursive-descent evaluator over the grammar parse_expr reads with implicit multiplication:
//   sum := product (('+'|'-') product)*      product := unary (('*'|'/')? unary)*
//   unary := ('+'|'-') unary | power          power := primary (('**'|'^') unary)?
//   primary := number | name | function primary | '(' sum ')'
class Evaluator {
 public:
  Evaluator(std::string_view text, int point) : s_(text), point_(point) {}

  std::optional<double> run() {
    std::optional<double> value = sum();
    if (!value || i_ != s_.size() || !std::isfinite(*value)) return std::nullopt;
    return value;
  }

 private:
  bool peek(std::string_view token) const { return s_.substr(i_).starts_with(token); }
  bool take(std::string_view token) {
    if (!peek(token)) return false;
    i_ += token.size();
    return true;
  }
  bool starts_primary() const {
    if (i_ >= s_.size()) return false;
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    return std::isdigit(c) || c == '.' || c == '(' || std::isalpha(c) || c >= 0x80;
  }

  std::optional<double> sum() {
    std::optional<double> value = product();
    while (value) {
      if (take("+")) {
        std::optional<double> rhs = product();
        value = rhs ? std::optional(*value + *rhs) : std::nullopt;
      } else if (take("-")) {
        std::optional<double> rhs = product();
        value = rhs ? std::optional(*value - *rhs) : std::nullopt;
      } else {
        break;
      }
    }
    return value;
  }

  std::optional<double> product() {
    std::optional<double> value = unary();
    while (value) {
      if (!peek("**") && take("*")) {
        std::optional<double> rhs = unary();
        value = rhs ? std::optional(*value * *rhs) : std::nullopt;
      } else if (take("/")) {
        std::optional<double> rhs = unary();
        value = rhs && *rhs != 0 ? std::optional(*value / *rhs) : std::nullopt;
      } else if (starts_primary()) {  // implicit multiplication: 2x, 2(3), 3sqrt(2)
        std::optional<double> rhs = power();
        value = rhs ? std::optional(*value * *rhs) : std::nullopt;
      } else {
        break;
      }
    }
    return value;
  }

  std::optional<double> unary() {
    if (take("-")) {
      std::optional<double> v = unary();
      return v ? std::optional(-*v) : std::nullopt;
    }
    if (take("+")) return unary();
    return power();
  }

  std::optional<double> power() {
    std::optional<double> base = primary();
    if (base && (take("**") || take("^"))) {
      std::optional<double> exponent = unary();
      if (!exponent) return std::nullopt;
      const double v = std::pow(*base, *exponent);
      return std::isfinite(v) ? std::optional(v) : std::nullopt;
    }
    return base;
  }

  std::optional<double> primary() {
    if (i_ >= s_.size()) return std::nullopt;
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (take("(")) {
      std::optional<double> v = sum();
      return v && take(")") ? v : std::nullopt;
    }
    if (std::isdigit(c) || c == '.') return number();
    if (std::isalpha(c) || c >= 0x80) return name();
    return std::nullopt;
  }

  std::optional<double> number() {
    char* end = nullptr;
    // strtod reads "1e3" and "1.5" as Python does; a hexadecimal or "inf" prefix cannot start with a digit here
    // except "0x", which parse_expr rejects too.
    if (peek("0x") || peek("0X")) return std::nullopt;
    const std::string copy(s_.substr(i_));
    const double v = std::strtod(copy.c_str(), &end);
    const size_t used = static_cast<size_t>(end - copy.c_str());
    if (used == 0) return std::nullopt;
    i_ += used;
    return v;
  }

  std::optional<double> name() {
    using Function = double (*)(double);
    static const std::array<std::pair<std::string_view, Function>, 7> functions = {{
        {"sqrt", [](double x) { return x >= 0 ? std::sqrt(x) : NAN; }},
        {"sin", [](double x) { return std::sin(x); }},
        {"cos", [](double x) { return std::cos(x); }},
        {"tan", [](double x) { return std::tan(x); }},
        {"log", [](double x) { return x > 0 ? std::log(x) : NAN; }},
        {"ln", [](double x) { return x > 0 ? std::log(x) : NAN; }},
        {"exp", [](double x) { return std::exp(x); }},
    }};
    for (const auto& [fname, function] : functions) {
      if (take(fname)) {
        std::optional<double> argument = power();
        if (!argument) return std::nullopt;
        const double v = function(*argument);
        return std::isfinite(v) ? std::optional(v) : std::nullopt;
      }
    }
    if (take("pi")) return std::numbers::pi;
    // Any other letter (a UTF-8 character counts as one) is a variable.
    size_t length = 1;
    while (i_ + length < s_.size() && (static_cast<unsigned char>(s_[i_ + length]) & 0xC0) == 0x80) ++length;
    const std::string_view variable = s_.substr(i_, length);
    i_ += length;
    return variable_value(variable, point_);
  }

  std::string_view s_;
  int point_;
  size_t i_ = 0;
};

bool has_variables(std::string_view expression) {
  std::string rest = replace_all(replace_all(expression, "sqrt", ""), "pi", "");
  for (std::string_view f : {"sin", "cos", "tan", "log", "ln", "exp"}) rest = replace_all(rest, f, "");
  for (unsigned char c : rest) {
    if (std::isalpha(c) || c >= 0x80) return true;
  }
  return false;
}

}  // namespace

std::string latex_to_text(std::string_view latex) { return LatexToText(latex).run(); }

std::optional<double> evaluate_expression(std::string_view expression, int point) {
  return Evaluator(expression, point).run();
}

bool math_equal(std::string_view ground_truth, std::string_view given) {
  const int points = has_variables(ground_truth) || has_variables(given) ? 3 : 1;
  for (int point = 0; point < points; ++point) {
    const std::optional<double> a = evaluate_expression(ground_truth, point);
    const std::optional<double> b = evaluate_expression(given, point);
    if (!a || !b) return false;
    if (std::fabs(*a - *b) > 1e-9 * std::max({1.0, std::fabs(*a), std::fabs(*b)})) return false;
  }
  return true;
}

}  // namespace moeserve::eval
