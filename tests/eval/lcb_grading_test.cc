// The harness's report read as hostile input (lcb_grading.h): records in order grade a run; forged lines
// (nested a million deep, out of order, of another shape) end it with a reason and never crash the evaluator.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "eval/lcb_grading.h"
#include "eval/lcb_runner.h"

namespace moeserve::eval {
namespace {

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(LcbReport, GradesRecordsInOrder) {
  const std::vector<LcbTest> tests = {{"1 2\n", "3\n"}, {"2 2\n", "4\n"}};
  LcbReport report(tests, false);
  EXPECT_TRUE(report.take(R"({"event": "compiled"})"));
  EXPECT_TRUE(report.take(R"({"test": 0, "status": "ok", "output": "3\n", "other": 5})"));  // others ignored
  EXPECT_FALSE(report.take(R"({"test": 1, "status": "ok", "output": "4.0"})"));  // the last: nothing to wait for
  EXPECT_EQ(report.tests_passed(), 2);
  EXPECT_EQ(report.detail(), "");
}

TEST(LcbReport, StopsAtTheFirstFailureWithItsReason) {
  const std::vector<LcbTest> tests = {{"", "3"}, {"", "4"}};
  const auto reason = [&](const std::vector<std::string>& lines) {
    LcbReport report(tests, false);
    for (const std::string& line : lines) {
      if (!report.take(line)) break;
    }
    return report.detail();
  };
  EXPECT_EQ(reason({R"({"event": "compile_error", "error": "SyntaxError"})"}), "compile error: SyntaxError");
  EXPECT_EQ(reason({R"({"event": "compiled"})", R"({"test": 0, "status": "timeout"})"}), "test 0: time limit exceeded");
  EXPECT_EQ(reason({R"({"event": "compiled"})", R"({"test": 0, "status": "error", "error": "E"})"}),
            "test 0: runtime error: E");
  EXPECT_EQ(reason({R"({"event": "compiled"})", R"({"test": 1, "status": "ok", "output": "4"})"}),
            "the harness reported test 1 out of order");
  EXPECT_EQ(reason({R"({"test": 0, "status": "ok", "output": "3"})"}), "the harness reported test 0 out of order");
  EXPECT_EQ(reason({R"({"event": "compiled"})", R"({"test": 0, "status": "ok", "output": "5"})"}),
            "test 0: wrong answer: got 5, expected 3");
  EXPECT_EQ(reason({"not json"}), "the harness wrote something else: not json");
  EXPECT_EQ(reason({"[1, 2]"}), "the harness wrote something else: [1, 2]");
  EXPECT_EQ(reason({R"({"event": "compiled"})", R"({"test": -1, "status": "ok"})"}),
            R"(the harness wrote something else: {"test": -1, "status": "ok"})");
}

TEST(LcbReport, ForgedDeepLinesAreRefusedUnparsed) {
  // 10^6 levels crash nlohmann's parse (and 10^5 its dump) by stack overflow.
  const std::vector<LcbTest> tests = {{"", "[1]"}};
  const std::string deep = nested(1'000'000);
  for (const std::string& line : {deep, R"({"test": 0, "status": "ok", "output": )" + deep + "}",
                                  R"({"event": )" + deep + "}"}) {
    LcbReport report(tests, true);
    EXPECT_FALSE(report.take(line));
    EXPECT_TRUE(report.detail().starts_with("the harness wrote something else: ")) << report.detail().substr(0, 80);
  }
  // A deep result in the output string: not equal to a shallow expected one, and not parsed.
  EXPECT_FALSE(lcb_call_output_matches(nested(1'000'000), "[1]"));
  EXPECT_FALSE(lcb_call_output_matches("[1]", nested(1'000'000)));
  EXPECT_TRUE(lcb_call_output_matches(nested(kLcbMaxJsonDepth), nested(kLcbMaxJsonDepth)));
  EXPECT_FALSE(lcb_json_is_readable(nested(kLcbMaxJsonDepth + 1)));
  EXPECT_TRUE(lcb_json_is_readable(R"({"a": "[[[[[[", "b": [[1]]})"));  // brackets in strings do not count
}

TEST(LcbReport, HugeForgedOutputsCompareWithoutCopies) {
  // Five million lines, or words on one line, against a one-line expected output: unequal, word by word.
  std::string lines = "3";
  std::string words = "3";
  for (int i = 0; i < 5'000'000; ++i) {
    lines += "\n3";
    words += " 3";
  }
  EXPECT_FALSE(lcb_stdio_output_matches(lines, "3"));
  EXPECT_FALSE(lcb_stdio_output_matches(words, "3"));
  EXPECT_TRUE(lcb_stdio_output_matches("3.0 4", "3 4.00"));
  EXPECT_FALSE(lcb_stdio_output_matches("3 4 x", "3 4 5"));
  EXPECT_FALSE(lcb_stdio_output_matches("3 4", "3 4 5"));
  // A call-based result far longer than any spelling of the expected value.
  EXPECT_FALSE(lcb_call_output_matches("[" + std::string(1'000'000, '1') + "]", "[1]"));
  EXPECT_TRUE(lcb_call_output_matches("[false, true]", "[0, 1]"));
}

// End to end: a solution that writes a record whose output nests 200,000 deep to the harness's own report (the
// evaluator's dump of it overflowed the stack).
TEST(LcbReport, ASolutionForgingTheReportCannotCrashTheEvaluator) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  LcbProblem problem;
  problem.question_id = "forged";
  problem.public_tests = {{"", "1\n"}};
  LcbRunnerOptions options;
  options.timeout_seconds = 10;
  options.memory_bytes = 1ull << 30;
  const LcbVerdict verdict = LcbRunner(options).run(
      problem,
      "import __main__\nn = 200000\n__main__.results.write("
      "'{\"test\": 0, \"status\": \"ok\", \"output\": ' + '[' * n + ']' * n + '}\\n')\n"
      "__main__.results.flush()\nprint(1)\n");
  EXPECT_FALSE(verdict.passed);
  EXPECT_TRUE(verdict.detail.starts_with("the harness wrote something else: {\"test\": 0"))
      << verdict.detail.substr(0, 80);
}

}  // namespace
}  // namespace moeserve::eval
