// LiveCodeBench problems in their release format (livecodebench/code_generation_lite test*.jsonl, read by
// lcb_runner/benchmarks/code_generation.py @b1e7cab): question_title, question_content, platform, question_id,
// contest_id, contest_date, starter_code, difficulty, public_test_cases, private_test_cases, metadata.
//   public_test_cases:  a JSON string (or an already parsed list) of {input, output, testtype};
//   private_test_cases: the same JSON, or, in the lite release, base64 of zlib-compressed pickled JSON text:
//                       json.loads(pickle.loads(zlib.decompress(base64.b64decode(field)))); absent: none;
//   metadata:           a JSON string; "func_name" makes every test call-based (LeetCode's class Solution).
// The tests a sample must pass are the public ones followed by the private ones (get_evaluation_sample).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moeserve::eval {

struct LcbTest {
  std::string input;
  std::string output;
};

struct LcbProblem {
  std::string question_id;
  std::string question_title;
  std::string question_content;
  std::string platform;
  std::string contest_id;
  std::string contest_date;
  std::string starter_code;
  std::string difficulty;
  std::vector<LcbTest> public_tests;
  std::vector<LcbTest> private_tests;
  std::optional<std::string> func_name;  // set for functional (call-based) problems

  std::vector<LcbTest> all_tests() const;
};

// The bound on one problem's decompressed private tests: a compressed field inflating past it (a zlib bomb: 1.3 MB
// can inflate to over a GB) is an error naming the question and the limit, raised before more is allocated.
inline constexpr uint64_t kMaxLcbTestsBytes = uint64_t{512} << 20;
// Release rows carry their tests compressed: a line may be large, a file larger still.
inline constexpr uint64_t kMaxLcbLineBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxLcbFileBytes = uint64_t{64} << 30;

// One release row; an Error names the question id and the field that is malformed.
LcbProblem parse_lcb_problem(const nlohmann::json& row, uint64_t max_tests_bytes = kMaxLcbTestsBytes);
// A JSON-lines file of release rows; an Error names the file and line.
std::vector<LcbProblem> load_lcb_problems(const std::string& path, uint64_t max_tests_bytes = kMaxLcbTestsBytes);

// private_test_cases: JSON text (a list), else base64 -> zlib -> pickle -> JSON text.
std::vector<LcbTest> decode_lcb_tests(std::string_view field, uint64_t max_tests_bytes = kMaxLcbTestsBytes);

// The pieces of that decoding, each an Error on malformed input.
std::string base64_decode(std::string_view text);    // whitespace ignored; padding required as Python's
// At most max_bytes of output: more is an Error naming the limit.
std::string zlib_inflate(std::string_view compressed, uint64_t max_bytes = kMaxLcbTestsBytes);
// The str a pickle holds. Only what pickle.dumps(str) writes is read (protocols 2 to 5: PROTO, FRAME,
// SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, MEMOIZE, BINPUT, LONG_BINPUT, STOP); any other opcode is an Error
// naming it: no pickle feature that can call code is ever interpreted.
std::string unpickle_string(std::string_view pickle);

}  // namespace moeserve::eval
