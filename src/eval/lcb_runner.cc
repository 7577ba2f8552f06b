#include "eval/lcb_runner.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "eval/python_text.h"
#include "util/error.h"

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

// convert_line_to_decimals on both lines, then list equality.
bool lines_equal_as_decimals(std::string_view a, std::string_view b) {
  const std::vector<std::string_view> xs = python_split(a);
  const std::vector<std::string_view> ys = python_split(b);
  std::vector<Decimal> dx;
  std::vector<Decimal> dy;
  for (std::string_view x : xs) {
    auto d = parse_decimal(x);
    if (!d) return false;
    dx.push_back(*d);
  }
  for (std::string_view y : ys) {
    auto d = parse_decimal(y);
    if (!d) return false;
    dy.push_back(*d);
  }
  if (dx.size() != dy.size()) return false;
  for (size_t i = 0; i < dx.size(); ++i) {
    if (!decimals_equal(dx[i], dy[i])) return false;
  }
  return true;
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

std::string shorten(std::string_view text, size_t limit = 200) {
  if (text.size() <= limit) return std::string(text);
  while (limit > 0 && (static_cast<unsigned char>(text[limit]) & 0xC0) == 0x80) --limit;  // a whole character
  return fmt::format("{}...({} bytes)", text.substr(0, limit), text.size());
}

// The options with python made canonical (the sandbox's root shows the file, not the links to it) and, when
// it lies outside the system directories (e.g. a build under /opt), its installation shown read-only: the
// directory above its bin/, where Python looks for its standard library (or its own directory otherwise).
LcbRunnerOptions with_python_shown(LcbRunnerOptions options) {
  MOESERVE_CHECK(options.python.starts_with("/"), "LiveCodeBench: python must be an absolute path, not {}",
                 options.python);
  std::error_code error;
  const std::filesystem::path python = std::filesystem::canonical(options.python, error);
  MOESERVE_CHECK(!error, "LiveCodeBench: python {}: {}", options.python, error.message());
  options.python = python.string();
  if (!is_sandbox_system_path(options.python)) {
    const std::filesystem::path directory = python.parent_path();
    options.sandbox.read_only_paths.push_back(
        (directory.filename() == "bin" ? directory.parent_path() : directory).string());
  }
  return options;
}

}  // namespace

bool lcb_stdio_output_matches(std::string_view produced, std::string_view expected) {
  const std::vector<std::string_view> got = stripped_lines(produced);
  const std::vector<std::string_view> want = stripped_lines(expected);
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && !lines_equal_as_decimals(got[i], want[i])) return false;
  }
  return true;
}

bool lcb_call_output_matches(std::string_view produced_json, std::string_view expected_json) {
  const nlohmann::json produced = nlohmann::json::parse(produced_json, nullptr, false);
  const nlohmann::json expected = nlohmann::json::parse(expected_json, nullptr, false);
  if (produced.is_discarded() || expected.is_discarded()) return false;
  return python_equal(produced, expected);
}

LcbRunner::LcbRunner(LcbRunnerOptions options)
    : options_(with_python_shown(std::move(options))), sandbox_(options_.sandbox) {
  MOESERVE_CHECK(options_.timeout_seconds > 0, "LiveCodeBench: the per-test timeout must be positive");
}

LcbVerdict LcbRunner::run(const LcbProblem& problem, const std::string& code) const {
  LcbVerdict verdict;
  const std::vector<LcbTest> tests = problem.all_tests();
  verdict.tests_total = static_cast<int>(tests.size());
  if (tests.empty()) {
    verdict.detail = "the problem has no tests";
    return verdict;
  }
  const bool call_based = problem.func_name.has_value();
  if (call_based) {
    for (size_t i = 0; i < tests.size(); ++i) {
      if (nlohmann::json::parse(tests[i].output, nullptr, false).is_discarded()) {
        verdict.detail = fmt::format("test {}: the expected output is not JSON", i);  // lcb_runner fails it too
        return verdict;
      }
    }
  }
  nlohmann::json spec = {{"mode", call_based ? "call" : "stdio"}, {"timeout", options_.timeout_seconds}};
  if (call_based) spec["fn_name"] = *problem.func_name;
  spec["inputs"] = nlohmann::json::array();
  for (const LcbTest& t : tests) spec["inputs"].push_back(t.input);

  SandboxRequest request;
  request.argv = {options_.python, "-I", "../harness.py", "../spec.json", "../solution.py"};
  request.files = {{"harness.py", kLcbHarnessSource}, {"spec.json", spec.dump()}, {"solution.py", code}};
  const double budget = (options_.timeout_seconds + 1) * static_cast<double>(tests.size()) + 5;
  request.limits.wall_seconds = budget;
  request.limits.cpu_seconds = budget;
  request.limits.memory_bytes = options_.memory_bytes;
  request.limits.max_processes = options_.max_processes;

  bool compiled = false;
  const auto on_line = [&](std::string_view line) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.is_object()) {
      verdict.detail = fmt::format("the harness wrote something else: {}", shorten(line));
      return false;
    }
    // A field's text ("" when absent): the program shares the harness's process, so nothing here is trusted.
    const auto text = [&](const char* name) {
      auto it = record.find(name);
      if (it == record.end()) return std::string();
      return it->is_string() ? it->get<std::string>() : it->dump();
    };
    if (record.contains("event")) {
      compiled = record["event"] == "compiled";
      if (!compiled) verdict.detail = fmt::format("compile error: {}", text("error"));
      return compiled;
    }
    const auto test = record.find("test");
    if (test == record.end() || !test->is_number_unsigned()) {
      verdict.detail = fmt::format("the harness wrote something else: {}", shorten(line));
      return false;
    }
    const size_t index = test->get<size_t>();
    const std::string status = text("status");
    if (!compiled || index != static_cast<size_t>(verdict.tests_passed) || index >= tests.size()) {
      verdict.detail = fmt::format("the harness reported test {} out of order", index);
      return false;
    }
    if (status != "ok") {
      verdict.detail = status == "timeout" ? fmt::format("test {}: time limit exceeded", index)
                                           : fmt::format("test {}: runtime error: {}", index, text("error"));
      return false;
    }
    const std::string output = text("output");
    const bool match = call_based ? lcb_call_output_matches(output, tests[index].output)
                                  : lcb_stdio_output_matches(output, tests[index].output);
    if (!match) {
      verdict.detail = fmt::format("test {}: wrong answer: got {}, expected {}", index, shorten(output),
                                   shorten(tests[index].output));
      return false;
    }
    ++verdict.tests_passed;
    return verdict.tests_passed < verdict.tests_total;  // all passed: nothing left to wait for
  };
  const SandboxResult result = sandbox_.run(request, on_line);
  verdict.seconds = result.wall_seconds;
  verdict.passed = verdict.tests_passed == verdict.tests_total;
  if (!verdict.passed && verdict.detail.empty()) {
    switch (result.end) {
      case SandboxResult::End::timed_out:
        verdict.detail = fmt::format("killed at the global time limit ({:.0f} s)", budget);
        break;
      case SandboxResult::End::signaled:
        verdict.detail = fmt::format("killed by signal {}", result.signal);
        break;
      case SandboxResult::End::failed_to_start:
        verdict.detail = fmt::format("sandbox: {}", result.setup_error);
        break;
      default:
        verdict.detail = fmt::format("the harness ended ({}, exit code {}) after {} of {} tests: {}",
                                     end_name(result.end), result.exit_code, verdict.tests_passed,
                                     verdict.tests_total, shorten(result.stderr_text, 500));
    }
  }
  return verdict;
}

std::vector<LcbVerdict> LcbRunner::run_all(const std::vector<LcbJob>& jobs) const {
  std::vector<LcbVerdict> verdicts(jobs.size());
  const size_t workers = std::min(
      jobs.size(), options_.workers > 0 ? options_.workers : std::max<size_t>(1, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
          MOESERVE_CHECK(jobs[i].problem != nullptr, "LiveCodeBench job {} has no problem", i);
          verdicts[i] = run(*jobs[i].problem, jobs[i].code);
        }
      } catch (...) {
        errors[w] = std::current_exception();
        next = jobs.size();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return verdicts;
}

}  // namespace moeserve::eval
