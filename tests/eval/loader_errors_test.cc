// Issue 14 for the evaluation datasets and LiveCodeBench's release files: every bad row is an Error naming the
// file and line (and the question and field where there is one); compressed tests inflate only up to a cap.
#include <zlib.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "eval/datasets.h"
#include "eval/livecodebench.h"
#include "error_checks.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

using moeserve::testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = 0;
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    for (size_t j = 0; j < 3; ++j) group = group << 8 | (j < n ? static_cast<uint8_t>(bytes[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? alphabet[group >> (18 - 6 * j) & 63] : '=';
  }
  return out;
}

// zlib.compress of `size` zero bytes: about a thousandth of its inflated size.
std::string zlib_of_zeros(size_t size) {
  const std::string zeros(size, '\0');
  uLongf length = compressBound(static_cast<uLong>(size));
  std::string out(length, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &length, reinterpret_cast<const Bytef*>(zeros.data()),
                      static_cast<uLong>(size), 9),
            Z_OK);
  out.resize(length);
  return out;
}

std::string write_lines(const std::string& name, const std::string& text) {
  const std::string path = moeserve::testing::temp_dir("evalrows") + "/" + name;
  write_text_file(path, text);
  return path;
}

TEST(LcbLimits, PrivateTestsThatInflatePastTheCapAreRefused) {
  // 8 MiB of zeros compress to ~8 KB: a bomb for a cap of 1 MiB (the default cap, 512 MiB, works the same way).
  const std::string bomb = base64(zlib_of_zeros(8 << 20));
  const std::string path =
      write_lines("lcb.jsonl", R"({"question_id": "ok"})" "\n" R"({"question_id": "bomb", "private_test_cases": ")" +
                                   bomb + "\"}\n");
  const std::string error =
      moeserve::testing::error_under_memory_limit([&] { load_lcb_problems(path, 1 << 20); }, 64 << 20);
  EXPECT_EQ(error, path + ":2: LiveCodeBench question bomb: private_test_cases: zlib: the data inflates to more "
                          "than 1 MiB (the limit)");
  EXPECT_EQ(kMaxLcbTestsBytes, uint64_t{512} << 20);
  EXPECT_EQ(zlib_inflate(zlib_of_zeros(1 << 20), 1 << 20), std::string(1 << 20, '\0'));  // exactly the cap is fine
}

TEST(LcbLimits, PickleLengthsCannotWrapAround) {
  // BINUNICODE8 with a length of 2^64 - 1: i + length would wrap to a small offset.
  const std::string pickle = std::string("\x80\x04\x8d", 3) + std::string(8, '\xff') + "abc.";
  EXPECT_EQ(error_of([&] { unpickle_string(pickle); }), "pickle: truncated string at byte 11");
}

TEST(LcbLimits, NestedAndOverflowingJsonFieldsNameTheQuestion) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  const std::string path = write_lines(
      "lcb.jsonl", R"({"question_id": "q1", "public_test_cases": ")" + deep + "\"}\n" +
                       R"({"question_id": "q2", "metadata": "{\"func_name\": 1e400}"})" + "\n");
  EXPECT_TRUE(contains(error_of([&] { load_lcb_problems(path); }),
                       path + ":1: LiveCodeBench question q1: public_test_cases: the test cases: [0][0]"));
  EXPECT_TRUE(contains(error_of([&] { load_lcb_problems(path); }), "JSON nested deeper than 64 levels"));
  const std::string second = write_lines(
      "lcb2.jsonl", R"({"question_id": "q2", "metadata": "{\"func_name\": 1e400}"})" "\n");
  EXPECT_TRUE(contains(error_of([&] { load_lcb_problems(second); }),
                       second + ":1: LiveCodeBench question q2: metadata is not valid JSON: func_name: number "
                                "overflow parsing '1e400'"));
}

TEST(EvalDatasetLimits, RowErrorsNameFileAndLine) {
  const std::string aime = write_lines("aime25.jsonl", "{\"question\": \"q\", \"answer\": \"1\"}\n{\"question\": " +
                                                           std::string(100, '[') + "}\n");
  EXPECT_TRUE(contains(error_of([&] { load_questions(ScorerKind::aime, aime, "aime25"); }),
                       aime + ":2: question[0][0]"));
  const std::string mmlu = write_lines("mmlu_pro.jsonl", "{\"question\": \"q\", \"answer\": \"A\"}\n");
  EXPECT_EQ(error_of([&] { load_questions(ScorerKind::mmlu_pro, mmlu, "mmlu_pro"); }),
            mmlu + ":1: the row has no choices field");
  const std::string gpqa = write_lines("gpqa.csv", "Question,Correct Answer\n\"unclosed,x\n");
  EXPECT_EQ(error_of([&] { load_questions(ScorerKind::gpqa, gpqa, "gpqa_diamond"); }),
            gpqa + ": CSV: a quoted field is not closed");
  EXPECT_EQ(error_of([] { load_questions(ScorerKind::aime, "/dev/zero", "aime25"); }),
            "/dev/zero:1: line longer than 64 MiB");
}

}  // namespace
}  // namespace moeserve::eval
