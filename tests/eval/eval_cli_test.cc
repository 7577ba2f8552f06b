// moeserve eval and moeserve comply as a user runs them: offline scoring of an accuracy log decoded by a
// tokenizer file, compliance verdicts with their exit codes and verify files, and an end-to-end run on the
// tiny model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/fake_server.h"
#include "eval/accuracy_log.h"
#include "eval_test_util.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

using ::testing::HasSubstr;
using testing::harmony_reply;
using testing::synthetic_tokens;

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/fixtures/eval";

std::string moeserve(const std::string& arguments) { return std::string(MOESERVE_BINARY) + " " + arguments; }

// A tiktoken rank file in which rank b (< 256) is the byte b and the other ranks are filler: it decodes the
// synthetic tokens of eval_test_util.h as o200k_harmony decodes special tokens, by name.
std::string synthetic_rank_file(const std::string& dir) {
  const std::string path = dir + "/synthetic.tiktoken";
  if (std::filesystem::exists(path)) return path;
  std::ofstream out(path);
  static constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto encode = [](const std::string& bytes) {
    std::string text;
    for (size_t i = 0; i < bytes.size(); i += 3) {
      uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
      if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
      if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
      text += kBase64[(v >> 18) & 63];
      text += kBase64[(v >> 12) & 63];
      text += i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=';
      text += i + 2 < bytes.size() ? kBase64[v & 63] : '=';
    }
    return text;
  };
  for (int rank = 0; rank < 199998; ++rank) {
    std::string bytes;
    if (rank < 256) {
      bytes = std::string(1, static_cast<char>(rank));
    } else {  // four bytes, unique per rank, never a single byte
      bytes = {static_cast<char>(0xF8), static_cast<char>(rank >> 16), static_cast<char>((rank >> 8) & 0xFF),
               static_cast<char>(rank & 0xFF)};
    }
    out << encode(bytes) << " " << rank << "\n";
  }
  return path;
}

// Writes a log of GPQA replies, `correct` of `total` right, and the reference it is scored against.
void write_gpqa_run(const std::string& dir, int correct, int total) {
  std::string log = "[";
  std::ofstream reference(dir + "/reference.jsonl");
  for (int i = 0; i < total; ++i) {
    reference << R"({"dataset": "gpqa_diamond", "ground_truth": "B"})" << "\n";
    const std::vector<int32_t> tokens = synthetic_tokens(harmony_reply(i < correct ? "Answer: B" : "C"));
    log += (i > 0 ? ",\n" : "\n") + accuracy_log_record(i, i, tokens);
  }
  write_text_file(dir + "/mlperf_log_accuracy.json", log + "\n]\n");
}

TEST(EvalCli, ScoresAnAccuracyLogAsTheReferenceScriptDoes) {
  const std::string dir = moeserve::testing::temp_dir("eval-cli");
  write_gpqa_run(dir, 3, 4);
  const auto result = moeserve::testing::run_command(
      moeserve("eval --accuracy-log " + dir + "/mlperf_log_accuracy.json --reference " + dir +
               "/reference.jsonl --tokenizer " + synthetic_rank_file(dir) + " --output-file " + dir + "/out.json"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("gpqa_diamond                     3        4        5"));
  EXPECT_THAT(result.output, HasSubstr("'exact_match': 75.000"));
  const nlohmann::json json = nlohmann::json::parse(read_text_file(dir + "/out.json"));
  EXPECT_DOUBLE_EQ(json["summary"]["exact_match"].get<double>(), 75.0);
  EXPECT_EQ(json["detailed_results"][3]["extracted_answer"], "C");
}

TEST(EvalCli, ScoresDecodedOutputsWithDeepSeekRules) {
  const std::string dir = moeserve::testing::temp_dir("eval-cli-ds");
  write_text_file(dir + "/reference.jsonl",
                  "{\"dataset\": \"math500\", \"ground_truth\": \"\\\\frac{1}{2}\"}\n"
                  "{\"dataset\": \"gpqa\", \"ground_truth\": \"A\"}\n");
  write_text_file(dir + "/outputs.jsonl",
                  "{\"qsl_idx\": 0, \"text\": \"<think>half</think> \\\\boxed{0.5}\", \"token_count\": 10}\n"
                  "{\"qsl_idx\": 1, \"text\": \"ANSWER: B\", \"token_count\": 20}\n");
  const auto result = moeserve::testing::run_command(moeserve("eval --outputs " + dir + "/outputs.jsonl --reference " +
                                                              dir + "/reference.jsonl --rules deepseek-r1"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("{'exact_match': 50.0, 'tokens_per_sample': 15.0, 'num-samples': 2}"));
}

TEST(EvalCli, ExplainsWhatIsMissing) {
  const auto neither = moeserve::testing::run_command(moeserve("eval"));
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_THAT(neither.output, HasSubstr("give either --accuracy-log/--outputs with --reference"));
  const auto no_reference = moeserve::testing::run_command(moeserve("eval --outputs /nonexistent.jsonl"));
  EXPECT_THAT(no_reference.output, HasSubstr("--reference is required"));
  const auto bad_dataset = moeserve::testing::run_command(moeserve("eval --dataset healthbench=x --model y"));
  EXPECT_THAT(bad_dataset.output, HasSubstr("no scorer for dataset \"healthbench\""));
  const auto help = moeserve::testing::run_command(moeserve("eval --help"));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("Exit codes: 0 the outputs were scored"));
}

TEST(EvalCli, EmptyInputIsAnErrorNotAScoreOfZero) {
  const std::string dir = moeserve::testing::temp_dir("eval-cli-empty");
  write_gpqa_run(dir, 1, 2);
  write_text_file(dir + "/empty.json", "[\n]\n");
  const auto empty_log = moeserve::testing::run_command(moeserve("eval --accuracy-log " + dir + "/empty.json --reference " +
                                                                 dir + "/reference.jsonl"));
  EXPECT_EQ(empty_log.exit_code, 2) << empty_log.output;
  EXPECT_THAT(empty_log.output, HasSubstr("the accuracy log " + dir + "/empty.json has no entries: nothing to score"));
  EXPECT_THAT(empty_log.output, ::testing::Not(HasSubstr("exact_match")));
  write_text_file(dir + "/empty.jsonl", "");
  const auto no_outputs = moeserve::testing::run_command(
      moeserve("eval --outputs " + dir + "/empty.jsonl --reference " + dir + "/reference.jsonl"));
  EXPECT_EQ(no_outputs.exit_code, 2) << no_outputs.output;
  EXPECT_THAT(no_outputs.output, HasSubstr("has no outputs: nothing to score"));
  const auto no_questions =
      moeserve::testing::run_command(moeserve("eval --dataset aime25=" + dir + "/empty.jsonl --model " + dir));
  EXPECT_EQ(no_questions.exit_code, 2) << no_questions.output;
  EXPECT_THAT(no_questions.output, HasSubstr("hold no questions: nothing to evaluate"));
  write_text_file(dir + "/mlperf_log_accuracy.json", "[]");
  const auto comply = moeserve::testing::run_command(moeserve("comply TEST09 -c " + dir + " -o " + dir + "/out"));
  EXPECT_EQ(comply.exit_code, 2) << comply.output;
  EXPECT_THAT(comply.output, HasSubstr("comply TEST09: " + dir + "/mlperf_log_accuracy.json has no entries"));
}

// `eval --endpoint` against the fake server, which answers every question with the same Harmony reply.
moeserve::testing::CommandResult eval_over_http(const bench::testing::FakeServerOptions& options,
                                                const std::string& flags) {
  bench::testing::FakeServerOptions o = options;
  o.reply = Tokenizer::o200k_harmony()->encode("<|channel|>final<|message|>Answer: 204<|return|>", AllowedSpecial::all());
  bench::testing::FakeStreamingServer server(o);
  return moeserve::testing::run_command(moeserve("eval --dataset aime24=" + kFixtures +
                                                 "/aime24_excerpt.jsonl --limit 2 --repeats 2 --endpoint " +
                                                 server.url() + " " + flags));
}

TEST(EvalCli, OverHttpFailedSamplesMakeTheRunInvalidAndAKeyIsSent) {
  const auto good = eval_over_http({}, "");
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_THAT(good.output, HasSubstr("aime24                           2        4   50.00%"));  // 204 is question 1's

  bench::testing::FakeServerOptions dying;
  dying.fail_after_requests = 2;
  const auto some_failed = eval_over_http(dying, "");
  EXPECT_EQ(some_failed.exit_code, 1) << some_failed.output;
  EXPECT_THAT(some_failed.output, HasSubstr("INVALID: 2 of 4 samples failed to generate; the first: HTTP 500"));

  bench::testing::FakeServerOptions keyed;
  keyed.api_key = "sekret";
  const auto all_failed = eval_over_http(keyed, "--served-model m");
  EXPECT_EQ(all_failed.exit_code, 2) << all_failed.output;
  EXPECT_THAT(all_failed.output, HasSubstr("all 4 samples failed to generate; the first: HTTP 401 Unauthorized on "
                                           "/v1/completions: pass --api-key or set OPENAI_API_KEY"));
  const auto with_key = eval_over_http(keyed, "--api-key sekret");
  EXPECT_EQ(with_key.exit_code, 0) << with_key.output;
}

TEST(ComplyCli, Test07And09PassAndFailWithExitCodes) {
  const std::string dir = moeserve::testing::temp_dir("comply-cli");
  const std::string ranks = synthetic_rank_file(dir);
  write_gpqa_run(dir, 607, 1000);  // 60.700 >= 60.698
  auto pass = moeserve::testing::run_command(moeserve("comply TEST07 -c " + dir + " -o " + dir + "/out --reference " +
                                                      dir + "/reference.jsonl --tokenizer " + ranks));
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  EXPECT_THAT(pass.output, HasSubstr("TEST07 accuracy 60.7 (threshold 60.698)\nTEST PASS"));
  EXPECT_THAT(read_text_file(dir + "/out/TEST07/verify_accuracy.txt"), HasSubstr("'exact_match': 60.700"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/TEST07/accuracy/mlperf_log_accuracy.json"));

  write_gpqa_run(dir, 606, 1000);  // 60.600 < 60.698
  auto fail = moeserve::testing::run_command(moeserve("comply TEST07 -c " + dir + " -o " + dir + "/out --reference " +
                                                      dir + "/reference.jsonl --tokenizer " + ranks));
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_THAT(fail.output, HasSubstr("TEST FAIL"));
  EXPECT_THAT(read_text_file(dir + "/out/TEST07/verify_accuracy.txt"), HasSubstr("TEST FAIL"));

  // TEST09 over the same log: 1000 replies of a few dozen tokens each, far below 1150.38.
  write_text_file(dir + "/audit.config", "*.*.test09_min_output_tokens = 10\n*.*.test09_max_output_tokens = 1000\n");
  auto inside = moeserve::testing::run_command(
      moeserve("comply TEST09 -c " + dir + " -o " + dir + "/out --audit-config " + dir + "/audit.config"));
  EXPECT_EQ(inside.exit_code, 0) << inside.output;
  EXPECT_THAT(read_text_file(dir + "/out/TEST09/verify_output_len.txt"), HasSubstr("TEST PASS"));
  auto outside = moeserve::testing::run_command(moeserve("comply TEST09 -c " + dir + " -o " + dir + "/out"));
  EXPECT_EQ(outside.exit_code, 1) << outside.output;
  EXPECT_THAT(outside.output, HasSubstr("(bounds [1150.38, 1406.02])\nTEST FAIL"));
}

TEST(ComplyCli, Test06WritesTheCheckerLines) {
  const std::string dir = moeserve::testing::temp_dir("comply-06");
  const std::vector<int32_t> tokens = {5, 6, 1};
  write_text_file(dir + "/mlperf_log_accuracy.json",
                  "[\n" + accuracy_log_record(0, 0, tokens, std::vector<int32_t>{5}) + "\n]\n");
  auto result = moeserve::testing::run_command(moeserve("comply TEST06 -c " + dir + " -o " + dir + "/out --scenario Server"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(read_text_file(dir + "/out/TEST06/verify_accuracy.txt"),
            "First token check pass: True\nEOS check pass: True\nSample length check pass: True\n"
            "TEST06 verification complete\n");
  auto missing = moeserve::testing::run_command(moeserve("comply TEST06 -c " + dir + " -o " + dir + "/out"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("--scenario is required"));
}

TEST(EvalCli, RunsEndToEndOnTheTinyModel) {
  const std::string model = moeserve::testing::tiny_model();
  if (!file_exists(model + "/tokenizer.json")) write_tokenizer_files(*Tokenizer::o200k_harmony(), model);
  const std::string dir = moeserve::testing::temp_dir("eval-e2e");
  const auto result = moeserve::testing::run_command(
      moeserve("eval --dataset aime25=" + kFixtures + "/aime25_excerpt.jsonl --dataset livecodebench=" + kFixtures +
               "/lcb_excerpt.jsonl --limit 2 --repeats 2 --max-tokens 4 --temperature 0 --threads 1 --model " + model +
               " --samples-out " + dir + "/samples.jsonl --output-file " + dir + "/summary.json"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // Random weights answer nothing right; what matters is that every sample went through.
  EXPECT_THAT(result.output, HasSubstr("aime25                           2        4    0.00%"));
  EXPECT_THAT(result.output, HasSubstr("livecodebench                    2        4    0.00%"));
  std::ifstream samples(dir + "/samples.jsonl");
  int lines = 0;
  for (std::string line; std::getline(samples, line); ++lines) {
    const nlohmann::json s = nlohmann::json::parse(line);
    EXPECT_EQ(s["tokens"], 4);
    EXPECT_FALSE(s["is_correct"].get<bool>());
  }
  EXPECT_EQ(lines, 8);
  EXPECT_EQ(nlohmann::json::parse(read_text_file(dir + "/summary.json"))["datasets"].size(), 2u);
}

}  // namespace
}  // namespace moeserve::eval
