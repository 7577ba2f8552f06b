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

// One release row; an Error names the question id and the field that is malformed.
LcbProblem parse_lcb_problem(const nlohmann::json& row);
// A JSON-lines file of release rows; an Error names the file and line.
std::vector<LcbProblem> load_lcb_problems(const std::string& path);

// private_test_cases: JSON text, else base64 -> zlib -> pickle -> JSON text.
std::vector<LcbTest> decode_lcb_tests(std::string_view field);

// The pieces of that decoding, each an Error on malformed input.
std::string base64_decode(std::string_view text);    // whitespace ignored; padding required as Python's
std::string zlib_inflate(std::string_view compressed);
// The str a pickle holds. Only what pickle.dumps(str) writes is read (protocols 2 to 5: PROTO, FRAME,
// SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, MEMOIZE, BINPUT, LONG_BINPUT, STOP); any other opcode is an Error
// naming it: no pickle feature that can call code is ever interpreted.
std::string unpickle_string(std::string_view pickle);

}  // namespace moeserve::eval
