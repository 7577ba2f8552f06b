// Grading one LiveCodeBench run (lcb_runner.h): lcb_runner's comparisons (grade_stdio / grade_call_based at
// @b1e7cab) and the reading of the harness's report. The program shares the harness's process and can write
// any line to the report, so every line is hostile input: none can make the evaluator recurse deeper than
// kLcbMaxJsonDepth or hold much more memory than the line's own bytes, whatever it holds.
//   stdin/stdout: both texts stripped and split on "\n", each line stripped; the line counts must agree and
//                 each line be equal, or else read as whitespace-separated decimals and be equal as numbers
//                 (Python's Decimal: "1.0" equals "1", "1e2" equals "100");
//   call-based:   the result (a tuple as a list) equals the JSON-decoded expected output with Python's ==
//                 (1 == 1.0 == True; lists and dicts element by element). Integers beyond 64 bits compare as
//                 doubles, as JSON decoding here reads them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "eval/livecodebench.h"

namespace moeserve::eval {

// nlohmann's dump() recurses per level of nesting (3.11.2 overflows an 8 MiB stack at 10^5 levels, and its
// parse at 10^6): texts nested deeper than this are refused before they are parsed.
inline constexpr size_t kLcbMaxJsonDepth = 256;

bool lcb_stdio_output_matches(std::string_view produced, std::string_view expected);
// produced and expected are JSON texts; false when either is not JSON or is nested deeper than
// kLcbMaxJsonDepth, and when produced is over 8 times as long as expected (plus 4 KiB): Python's json.dumps
// spells an equal value at most ~5 times as long (False for 0, "\u00e9" for é).
bool lcb_call_output_matches(std::string_view produced_json, std::string_view expected_json);
// True when text is JSON nested no deeper than kLcbMaxJsonDepth (an expected output must be).
bool lcb_json_is_readable(std::string_view text);

// The harness's report (lcb_harness.py's protocol), graded line by line against the problem's tests:
// {"event": "compiled"} or {"event": "compile_error", "error": ...}, then {"test": i, "status": "ok",
// "output": ...} or {"test": i, "status": "timeout" | "error", "error": ...} for each test in order. Any other
// line ends the run with the reason.
class LcbReport {
 public:
  LcbReport(const std::vector<LcbTest>& tests, bool call_based) : tests_(tests), call_based_(call_based) {}

  // Takes one line (without "\n"); false when the run should stop: a test failed, the line is not a record
  // in order, or every test passed.
  bool take(std::string_view line);

  int tests_passed() const { return tests_passed_; }
  const std::string& detail() const { return detail_; }  // why the run failed, once it has

 private:
  const std::vector<LcbTest>& tests_;
  bool call_based_;
  bool compiled_ = false;
  int tests_passed_ = 0;
  std::string detail_;
};

// text cut to about limit bytes (at a character boundary) with its full size, for a reason.
std::string lcb_shorten(std::string_view text, size_t limit = 200);

}  // namespace moeserve::eval
