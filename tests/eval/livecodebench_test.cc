// LiveCodeBench: the release formats (including the lite release's compressed pickled private tests), the
// output comparisons, and real problems (tests/fixtures/eval/lcb_excerpt.jsonl) run with hand-written correct
// and wrong solutions and with attacks, which must fail within their time limits leaving nothing running.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "eval/lcb_runner.h"
#include "eval/livecodebench.h"
#include "eval/sandbox_fixture.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/fixtures/eval";

TEST(LcbFormat, DecodesCompressedPickledTestsOfEveryProtocol) {
  // base64(zlib(pickle.dumps(json.dumps([{"input": "1", "output": "2", "testtype": "stdin"}]), protocol=P))),
  // made with Python 3.11 for P = 2, 3, 4, 5.
  for (const char* blob : {"eJxrYIowYWBgiK5WyswrKC1RslJQMlTSUVDKLy2Bco1A3JLU4pKSyoJUkEBxSUpmnlJtbCGDHgAJ8hGE",
                           "eJxrYI4wYWBgiK5WyswrKC1RslJQMlTSUVDKLy2Bco1A3JLU4pKSyoJUkEBxSUpmnlJtbCGDHgAKLxGF",
                           "eJxrYJlqwQABPSbR1UqZeQWlJUpWCkqGSjoKSvmlJVCuEYhbklpcUlJZkAoSKC5JycxTqo2dogcAOgkSqg==",
                           "eJxrYJ1qwQABPSbR1UqZeQWlJUpWCkqGSjoKSvmlJVCuEYhbklpcUlJZkAoSKC5JycxTqo2dogcAOksSqw=="}) {
    const std::vector<LcbTest> tests = decode_lcb_tests(blob);
    ASSERT_EQ(tests.size(), 1u) << blob;
    EXPECT_EQ(tests[0].input, "1");
    EXPECT_EQ(tests[0].output, "2");
  }
  EXPECT_EQ(decode_lcb_tests(R"([{"input": "a", "output": "b", "testtype": "stdin"}])")[0].output, "b");
}

TEST(LcbFormat, PickleReaderTakesOnlyAString) {
  EXPECT_EQ(unpickle_string(base64_decode("gASVCgAAAAAAAACMBsOpw6nDqZQu")), "ééé");  // protocol 4, UTF-8
  EXPECT_THROW(unpickle_string(base64_decode("VmEKcDAKLg==")), Error);      // protocol 0 is not read
  EXPECT_THROW(unpickle_string(base64_decode("gASVCAAAAAAAAABdlIwBYZRhLg==")), Error);  // a list, not a str
  EXPECT_THROW(unpickle_string(std::string("\x80\x04X\xff\x00\x00\x00ab", 10)), Error);  // truncated
  const std::string big(70000, 'x');  // BINUNICODE with a 4-byte length, outside any frame
  std::string pickled = std::string("\x80\x04X", 3) + std::string("\x70\x11\x01\x00", 4) + big + ".";
  EXPECT_EQ(unpickle_string(pickled), big);
}

TEST(LcbFormat, Base64AndZlibErrorsAreReported) {
  EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(base64_decode("aGVs\nbG8="), "hello");
  EXPECT_THROW(base64_decode("aGVsbG8"), Error);  // padding missing
  EXPECT_THROW(base64_decode("a*=="), Error);
  EXPECT_THROW(zlib_inflate("not zlib"), Error);
}

TEST(LcbFormat, LoadsReleaseRows) {
  const std::vector<LcbProblem> problems = load_lcb_problems(kFixtures + "/lcb_excerpt.jsonl");
  ASSERT_EQ(problems.size(), 7u);
  EXPECT_EQ(problems[0].question_id, "1873_A");
  EXPECT_EQ(problems[0].platform, "codeforces");
  EXPECT_FALSE(problems[0].func_name.has_value());
  EXPECT_EQ(problems[0].public_tests.size(), 1u);
  EXPECT_EQ(problems[1].func_name, "countSeniors");
  EXPECT_EQ(problems[1].public_tests[0].output, "2");
  EXPECT_TRUE(problems[1].private_tests.empty());
  const std::vector<LcbProblem> lite = load_lcb_problems(kFixtures + "/lcb_lite_release.jsonl");
  ASSERT_EQ(lite.size(), 1u);
  EXPECT_EQ(lite[0].public_tests.size(), 4u);
  ASSERT_EQ(lite[0].private_tests.size(), 4u);
  EXPECT_EQ(lite[0].private_tests[0].input, "96410\n");
  EXPECT_EQ(lite[0].all_tests().size(), 8u);
}

TEST(LcbFormat, MalformedRowsNameTheQuestion) {
  EXPECT_THAT([] { parse_lcb_problem(nlohmann::json::parse(R"({"question_id": "q7", "public_test_cases": "[{"})")); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("q7")));
  EXPECT_THAT([] { parse_lcb_problem(nlohmann::json::parse(R"({"question_id": "q8", "private_test_cases": "!!"})")); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("q8")));
}

TEST(LcbCompare, StdioFollowsGradeStdio) {
  EXPECT_TRUE(lcb_stdio_output_matches("YES\nNO\n", "YES\nNO"));
  EXPECT_TRUE(lcb_stdio_output_matches("  YES  \n NO\n\n", "YES\nNO\n"));  // stripped text and lines
  EXPECT_FALSE(lcb_stdio_output_matches("YES NO", "YES\nNO"));            // line counts differ
  EXPECT_TRUE(lcb_stdio_output_matches("3.0", "3"));                      // equal as decimals
  EXPECT_TRUE(lcb_stdio_output_matches("1e2 0.50", "100 .5"));
  EXPECT_TRUE(lcb_stdio_output_matches("-0", "0"));
  EXPECT_FALSE(lcb_stdio_output_matches("0.333", "0.3333"));
  EXPECT_FALSE(lcb_stdio_output_matches("yes", "YES"));
  EXPECT_TRUE(lcb_stdio_output_matches("NaN", "NaN"));   // equal text
  EXPECT_FALSE(lcb_stdio_output_matches("NaN", "nan"));  // as decimals, NaN never equals
  EXPECT_TRUE(lcb_stdio_output_matches("1_000", "1000"));
  EXPECT_FALSE(lcb_stdio_output_matches("1 2", "1 2 3"));
}

TEST(LcbCompare, CallsFollowPythonEquality) {
  EXPECT_TRUE(lcb_call_output_matches("[1, 2]", "[1,2]"));
  EXPECT_TRUE(lcb_call_output_matches("2.0", "2"));
  EXPECT_TRUE(lcb_call_output_matches("true", "1"));
  EXPECT_TRUE(lcb_call_output_matches(R"({"a": [1.0]})", R"({"a": [1]})"));
  EXPECT_FALSE(lcb_call_output_matches(R"("2")", "2"));
  EXPECT_FALSE(lcb_call_output_matches("[1, 2]", "[2, 1]"));
  EXPECT_FALSE(lcb_call_output_matches("NaN", "1"));
  EXPECT_FALSE(lcb_call_output_matches("null", "[]"));
}

// Runs solutions against the excerpt's problems, in a sandbox whose run directories live in a fresh directory so
// that any process left behind can be found by its working directory.
class LcbRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 is not installed";
    for (LcbProblem& p : load_lcb_problems(kFixtures + "/lcb_excerpt.jsonl")) problems_[p.question_id] = p;
    for (LcbProblem& p : load_lcb_problems(kFixtures + "/lcb_lite_release.jsonl")) problems_[p.question_id] = p;
    root_ = moeserve::testing::temp_dir("lcb-runner");
    ::chmod(root_.c_str(), 0755);  // the sandboxed program (uid 65534) reaches its directory through here
  }

  LcbRunner runner(double timeout_seconds = 10) const {
    LcbRunnerOptions options;
    options.timeout_seconds = timeout_seconds;
    options.memory_bytes = 1ull << 30;
    options.workers = 2;
    options.sandbox.temp_root = root_;
    return LcbRunner(options);
  }

  // Processes of runs under this test's root, left behind by a run; call it while the runner lives.
  int leftover_processes() const { return sandbox_testing::processes_of_runs(root_); }

  const LcbProblem& problem(const std::string& id) const { return problems_.at(id); }

  std::map<std::string, LcbProblem> problems_;
  std::string root_;
};

TEST_F(LcbRunnerTest, HandWrittenSolutionsPass) {
  const std::vector<LcbJob> jobs = {
      {&problem("1873_A"),
       "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
       "    diff = sum(1 for a, b in zip(s, 'abc') if a != b)\n    print('YES' if diff in (0, 2) else 'NO')\n"},
      {&problem("2727"),
       "class Solution:\n    def countSeniors(self, details: List[str]) -> int:\n"
       "        return sum(int(d[11:13]) > 60 for d in details)\n"},  // List comes from the typing prelude
      {&problem("2756"),
       "class Solution:\n    def buyChoco(self, prices, money):\n        a, b = sorted(prices)[:2]\n"
       "        return money - a - b if a + b <= money else money\n"},
      {&problem("abc302_a"), "A, B = map(int, input().split())\nprint((A + B - 1) // B)\n"},
      {&problem("abc306_a"),
       "import sys\ndef main():\n    n, s = sys.stdin.read().split()\n    print(''.join(c * 2 for c in s))\n"
       "if __name__ == '__main__':\n    main()\n"},
      {&problem("abc314_a"),
       "PI = '3.1415926535897932384626433832795028841971693993751058209749445923078164062862089986280348253421170679'"
       "\nn = int(input())\nprint(PI[:n + 2])\n"},
      {&problem("abc321_a"), "s = input().strip()\nprint('Yes' if all(a > b for a, b in zip(s, s[1:])) else 'No')\n"},
      {&problem("abc321_a_lite"),  // public and private (pickled) tests
       "s = input().strip()\nprint('Yes' if all(a > b for a, b in zip(s, s[1:])) else 'No')\n"},
      {&problem("abc302_a"), "A, B = map(int, input().split())\nprint(float((A + B - 1) // B) if A < 100 else (A + B - 1) // B)\n"},
  };
  const LcbRunner lcb = runner();
  const std::vector<LcbVerdict> verdicts = lcb.run_all(jobs);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(verdicts[i].passed) << jobs[i].problem->question_id << ": " << verdicts[i].detail;
    EXPECT_EQ(verdicts[i].tests_passed, verdicts[i].tests_total);
  }
  EXPECT_EQ(verdicts[7].tests_total, 8);
  EXPECT_EQ(leftover_processes(), 0);
}

TEST_F(LcbRunnerTest, WrongSolutionsFail) {
  struct Case {
    std::string id;
    std::string code;
    std::string detail;  // part of the reason given
  };
  const std::vector<Case> cases = {
      {"abc302_a", "A, B = map(int, input().split())\nprint(A // B)\n", "test 0: wrong answer"},
      {"2727", "class Solution:\n    def countSeniors(self, details):\n        return sum(int(d[11:13]) < 60 for d in details)\n",
       "wrong answer"},
      {"abc314_a", "import math\nn = int(input())\nprint(f'{math.pi:.{n}f}')\n", "wrong answer"},
      {"1873_A", "raise ValueError('no idea')\n", "runtime error"},
      {"abc321_a_lite",  // right on the public tests, wrong on the first private one
       "s = input().strip()\nprint('Yes' if len(s) <= 3 and all(a > b for a, b in zip(s, s[1:])) else 'No')\n",
       "test 4: wrong answer"},
      {"abc306_a", "import sys\nfor line in sys.stdin:\n    print(line)\n", "runtime error"},  // not iterable there
      {"2756", "class Solution:\n    def other(self):\n        return 0\n", "compile error"},     // no buyChoco
      {"abc302_a", "print(1\n", "compile error"},                                                 // syntax error
      {"abc306_a", "print('bbeeggiinnnneerr')\nprint('extra')\n", "wrong answer"},                // extra line
  };
  std::vector<LcbJob> jobs;
  for (const Case& c : cases) jobs.push_back({&problem(c.id), c.code});
  const LcbRunner lcb = runner();
  const std::vector<LcbVerdict> verdicts = lcb.run_all(jobs);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_FALSE(verdicts[i].passed) << cases[i].id << ": " << cases[i].code;
    EXPECT_NE(verdicts[i].detail.find(cases[i].detail), std::string::npos) << verdicts[i].detail;
  }
  EXPECT_EQ(leftover_processes(), 0);
}

TEST_F(LcbRunnerTest, AttacksFailWithinTheirLimitsAndLeaveNothing) {
  const std::string outside = moeserve::testing::temp_dir("lcb-outside");
  ::chmod(outside.c_str(), 01777);
  struct Case {
    std::string name;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"infinite loop", "while True:\n    pass\n"},
      {"loop in C, deaf to the alarm", "print(sum(range(10 ** 12)))\n"},
      {"fork bomb", "import posix, time\nfor i in range(10):\n    try:\n        posix.fork()\n    except OSError:\n"
                    "        pass\ntime.sleep(60)\n"},
      {"huge allocation", "b = bytearray(8 << 30)\nprint(len(b))\n"},
      {"write outside", "open('" + outside + "/escaped.txt', 'w').write('x')\nprint('Yes')\n"},
      {"network", "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\nprint('Yes')\n"},
      {"daemon", "import posix, time\nif posix.fork() == 0:\n    posix.setsid()\n    time.sleep(60)\n"
                 "print('Yes')\n"},
  };
  std::vector<LcbJob> jobs;
  for (const Case& c : cases) jobs.push_back({&problem("abc321_a"), c.code});  // 4 tests, per-test timeout 1 s
  const auto start = std::chrono::steady_clock::now();
  const LcbRunner lcb = runner(1);
  const std::vector<LcbVerdict> verdicts = lcb.run_all(jobs);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_FALSE(verdicts[i].passed) << cases[i].name;
    EXPECT_LE(verdicts[i].seconds, (1 + 1) * 4 + 5 + 1) << cases[i].name << ": " << verdicts[i].detail;
    std::cout << cases[i].name << ": " << verdicts[i].detail << " (" << verdicts[i].seconds << " s)\n";
  }
  EXPECT_LT(seconds, 40);
  EXPECT_FALSE(std::filesystem::exists(outside + "/escaped.txt"));
  EXPECT_EQ(leftover_processes(), 0);
}

}  // namespace
}  // namespace moeserve::eval
