// libFuzzer target: what a sandboxed LiveCodeBench program can make the evaluator read (lcb_grading.h). The
// input is FLAGS EXPECTED \0 REPORT: bit 0 of FLAGS picks call-based grading, EXPECTED holds up to four
// expected outputs separated by \1, and REPORT is the harness's report, one line per "\n". Checks, besides
// no crash, hang or unbounded allocation: the report never counts more tests than there are and gives a
// reason whenever it stops short; the stdio comparison is reflexive and symmetric; the call comparison is
// reflexive exactly on readable JSON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "eval/lcb_grading.h"

namespace {

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "sandbox_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve::eval;
  if (size == 0) return 0;
  const bool call_based = (data[0] & 1) != 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t split = input.find('\0');
  const std::string_view expected = input.substr(0, split);
  const std::string_view report_text = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);

  std::vector<LcbTest> tests;
  for (size_t begin = 0; tests.size() < 4;) {
    const size_t end = expected.find('\1', begin);
    tests.push_back({"", std::string(expected.substr(begin, end - begin))});
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  LcbReport report(tests, call_based);
  bool stopped = false;
  for (size_t begin = 0; begin <= report_text.size() && !stopped;) {
    const size_t end = std::min(report_text.find('\n', begin), report_text.size());
    stopped = !report.take(report_text.substr(begin, end - begin));
    begin = end + 1;
  }
  const int total = static_cast<int>(tests.size());
  check(report.tests_passed() >= 0 && report.tests_passed() <= total, "tests passed out of range");
  if (stopped) {
    check(!report.detail().empty() || report.tests_passed() == total, "stopped without a reason");
  }

  check(lcb_stdio_output_matches(report_text, report_text), "stdio comparison not reflexive");
  check(lcb_stdio_output_matches(report_text, expected) == lcb_stdio_output_matches(expected, report_text),
        "stdio comparison not symmetric");
  check(lcb_call_output_matches(report_text, report_text) == lcb_json_is_readable(report_text),
        "call comparison not reflexive on readable JSON");
  lcb_call_output_matches(report_text, expected);
  return 0;
}
