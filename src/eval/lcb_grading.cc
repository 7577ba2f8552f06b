#include "eval/lcb_grading.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "eval/python_text.h"

namespace moeserve::eval {
namespace {

// A Python Decimal reduced to a canonical form, so that equality is Decimal's numeric equality.
struct Decimal {
  enum class Kind { finite, infinity, nan } kind = Kind::finite;
  bool negative = false;
  std::string digits;  // no leading or trailing zeros; empty for zero
  long long exponent = 0;
};

std::optional<Decimal> parse_decimal(std::string_view text) {
  Decimal d;
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) d.negative = text[i++] == '-';
  const std::string rest = ascii_lower(text.substr(i));
  if (rest == "inf" || rest == "infinity") {
    d.kind = Decimal::Kind::infinity;
    return d;
  }
  if (rest.starts_with("nan") || rest.starts_with("snan")) {
    const size_t digits_from = rest.starts_with("nan") ? 3 : 4;
    if (rest.find_first_not_of("0123456789", digits_from) != std::string::npos) return std::nullopt;
    d.kind = Decimal::Kind::nan;
    return d;
  }
  // digits with single underscores between them, as Python's Decimal (PEP 515) reads them
  const auto read_digits = [&](std::string& out) {
    size_t count = 0;
    while (i < text.size()) {
      if (text[i] >= '0' && text[i] <= '9') {
        out.push_back(text[i++]);
        ++count;
      } else if (text[i] == '_' && count > 0 && i + 1 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '9') {
        ++i;
      } else {
        break;
      }
    }
    return count;
  };
  std::string coefficient;
  const size_t integer_digits = read_digits(coefficient);
  size_t fraction_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    fraction_digits = read_digits(coefficient);
  }
  if (integer_digits + fraction_digits == 0) return std::nullopt;
  long long exponent = -static_cast<long long>(fraction_digits);
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool negative_exponent = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative_exponent = text[i++] == '-';
    std::string e;
    if (read_digits(e) == 0) return std::nullopt;
    const long long value = e.size() > 17 ? 100000000000000000LL : std::stoll(e);
    exponent += negative_exponent ? -value : value;
  }
  if (i != text.size()) return std::nullopt;
  const size_t first = coefficient.find_first_not_of('0');
  if (first == std::string::npos) return d;  // zero, of any sign and exponent
  coefficient.erase(0, first);
  const size_t last = coefficient.find_last_not_of('0');
  exponent += static_cast<long long>(coefficient.size() - 1 - last);
  coefficient.erase(last + 1);
  d.digits = std::move(coefficient);
  d.exponent = exponent;
  return d;
}

bool decimals_equal(const Decimal& a, const Decimal& b) {
  if (a.kind == Decimal::Kind::nan || b.kind == Decimal::Kind::nan) return false;
  if (a.kind != b.kind) return false;
  if (a.kind == Decimal::Kind::infinity) return a.negative == b.negative;
  if (a.digits.empty() || b.digits.empty()) return a.digits.empty() && b.digits.empty();
  return a.negative == b.negative && a.digits == b.digits && a.exponent == b.exponent;
}

// convert_line_to_decimals on both lines, then list equality: word by word, so that a forged line of millions of
// words costs no memory (a word that is no decimal, or a count that differs, makes them unequal either way).
bool lines_equal_as_decimals(std::string_view a, std::string_view b) {
  PythonWords xs(a);
  PythonWords ys(b);
  for (;;) {
    std::string_view x, y;
    const bool more_x = xs.next(x);
    if (more_x != ys.next(y)) return false;
    if (!more_x) return true;
    const std::optional<Decimal> dx = parse_decimal(x);
    const std::optional<Decimal> dy = parse_decimal(y);
    if (!dx || !dy || !decimals_equal(*dx, *dy)) return false;
  }
}

// get_stripped_lines: the text stripped, split on "\n", each line stripped.
std::vector<std::string_view> stripped_lines(std::string_view text) {
  std::vector<std::string_view> lines = python_split(python_strip(text), "\n");
  for (std::string_view& line : lines) line = python_strip(line);
  return lines;
}

// Python's == on JSON-decoded values: numbers by value (a bool is the integer 0 or 1), containers element-wise.
bool python_equal(const nlohmann::json& a, const nlohmann::json& b) {
  const auto is_numeric = [](const nlohmann::json& v) { return v.is_number() || v.is_boolean(); };
  if (is_numeric(a) && is_numeric(b)) {
    const auto as_double = [](const nlohmann::json& v) { return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(); };
    if ((a.is_number_integer() || a.is_boolean()) && (b.is_number_integer() || b.is_boolean())) {
      const auto as_int = [](const nlohmann::json& v) {
        return v.is_boolean() ? (v.get<bool>() ? 1.0L : 0.0L)
                              : v.is_number_unsigned() ? static_cast<long double>(v.get<uint64_t>())
                                                       : static_cast<long double>(v.get<int64_t>());
      };
      return as_int(a) == as_int(b);
    }
    return as_double(a) == as_double(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!python_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto other = b.find(it.key());
      if (other == b.end() || !python_equal(*it, *other)) return false;
    }
    return true;
  }
  return a == b;
}

// The deepest nesting of arrays and objects in a JSON text, found without parsing it (strings skipped).
size_t json_depth(std::string_view text) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

nlohmann::json parse_bounded(std::string_view text) {
  if (json_depth(text) > kLcbMaxJsonDepth) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, false);
}

// A report line as a flat object of the protocol's fields only: nested values, arrays and other keys are
// dropped while parsing, so a forged line of millions of them costs no more than its bytes.
nlohmann::json parse_record(std::string_view line) {
  if (json_depth(line) > 1) return nlohmann::json(nlohmann::json::value_t::discarded);
  const auto keep = [](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::array_start) return false;
    if (event != nlohmann::json::parse_event_t::key) return true;
    const std::string& key = parsed.get_ref<const std::string&>();
    return key == "event" || key == "error" || key == "test" || key == "status" || key == "output";
  };
  return nlohmann::json::parse(line, keep, false);
}

}  // namespace

bool lcb_stdio_output_matches(std::string_view produced, std::string_view expected) {
  // The line counts first, which a forged output of millions of lines cannot make costly.
  const std::string_view produced_text = python_strip(produced);
  const std::string_view expected_text = python_strip(expected);
  if (std::count(produced_text.begin(), produced_text.end(), '\n') !=
      std::count(expected_text.begin(), expected_text.end(), '\n')) {
    return false;
  }
  const std::vector<std::string_view> got = stripped_lines(produced);
  const std::vector<std::string_view> want = stripped_lines(expected);
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && !lines_equal_as_decimals(got[i], want[i])) return false;
  }
  return true;
}

bool lcb_call_output_matches(std::string_view produced_json, std::string_view expected_json) {
  if (produced_json.size() > 8 * expected_json.size() + 4096) return false;
  const nlohmann::json produced = parse_bounded(produced_json);
  const nlohmann::json expected = parse_bounded(expected_json);
  if (produced.is_discarded() || expected.is_discarded()) return false;
  return python_equal(produced, expected);
}

bool lcb_json_is_readable(std::string_view text) { return !parse_bounded(text).is_discarded(); }

std::string lcb_shorten(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  while (limit > 0 && (static_cast<unsigned char>(text[limit]) & 0xC0) == 0x80) --limit;  // a whole character
  return fmt::format("{}...({} bytes)", text.substr(0, limit), text.size());
}

bool LcbReport::take(std::string_view line) {
  const nlohmann::json record = parse_record(line);
  if (record.is_discarded() || !record.is_object()) {
    detail_ = fmt::format("the harness wrote something else: {}", lcb_shorten(line));
    return false;
  }
  // A field's text ("" when absent); a non-string is flat here, so its dump is short work.
  const auto text = [&](const char* name) {
    auto it = record.find(name);
    if (it == record.end()) return std::string();
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  if (record.contains("event")) {
    compiled_ = record["event"] == "compiled";
    if (!compiled_) detail_ = fmt::format("compile error: {}", text("error"));
    return compiled_;
  }
  const auto test = record.find("test");
  if (test == record.end() || !test->is_number_unsigned()) {
    detail_ = fmt::format("the harness wrote something else: {}", lcb_shorten(line));
    return false;
  }
  const size_t index = test->get<size_t>();
  const std::string status = text("status");
  if (!compiled_ || index != static_cast<size_t>(tests_passed_) || index >= tests_.size()) {
    detail_ = fmt::format("the harness reported test {} out of order", index);
    return false;
  }
  if (status != "ok") {
    detail_ = status == "timeout" ? fmt::format("test {}: time limit exceeded", index)
                                  : fmt::format("test {}: runtime error: {}", index, text("error"));
    return false;
  }
  const std::string output = text("output");
  const bool match = call_based_ ? lcb_call_output_matches(output, tests_[index].output)
                                 : lcb_stdio_output_matches(output, tests_[index].output);
  if (!match) {
    detail_ = fmt::format("test {}: wrong answer: got {}, expected {}", index, lcb_shorten(output),
                          lcb_shorten(tests_[index].output));
    return false;
  }
  ++tests_passed_;
  return tests_passed_ < static_cast<int>(tests_.size());  // all passed: nothing left to wait for
}

}  // namespace moeserve::eval
