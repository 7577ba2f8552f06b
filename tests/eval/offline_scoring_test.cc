// Offline scoring of accuracy logs: synthetic logs whose correct rate is known per dataset reproduce MLPerf's
// exact_match (GPT-OSS: repeats-weighted; DeepSeek-R1: the plain mean, duplicates skipped).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "eval/offline_scoring.h"
#include "eval_test_util.h"
#include "test_util.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

using testing::harmony_reply;
using testing::synthetic_detokenize;
using testing::synthetic_tokens;

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/fixtures/eval";

// A log and its reference built together: each added sample gets the next qsl_idx.
struct SyntheticRun {
  std::vector<ReferenceRow> reference;
  std::vector<AccuracyLogEntry> log;

  void add(const std::string& dataset, const std::string& truth, const std::string& final_text, int repeats = 1) {
    const int64_t qsl_idx = static_cast<int64_t>(reference.size());
    reference.push_back({dataset, truth});
    for (int r = 0; r < repeats; ++r) {
      AccuracyLogEntry e;
      e.seq_id = static_cast<int64_t>(log.size());
      e.qsl_idx = qsl_idx;
      const std::vector<int32_t> tokens = synthetic_tokens(harmony_reply(final_text));
      e.data = int32_to_hex(tokens);
      e.token_count = static_cast<int64_t>(tokens.size());
      log.push_back(e);
    }
  }
};

std::map<std::string, std::shared_ptr<const LcbProblem>> excerpt_problems() {
  std::map<std::string, std::shared_ptr<const LcbProblem>> problems;
  for (LcbProblem& p : load_lcb_problems(kFixtures + "/lcb_excerpt.jsonl")) {
    const std::string id = p.question_id;
    problems[id] = std::make_shared<const LcbProblem>(std::move(p));
  }
  return problems;
}

TEST(OfflineScoring, GptOssExactMatchWeighsDatasetsByRepeats) {
  SyntheticRun run;
  // aime25: 2 questions x 8 repeats, 12 of 16 right -> 12/8 = 1.5 of 2.
  for (int r = 0; r < 8; ++r) run.add("aime25", "204", r < 6 ? "\\boxed{204}" : "\\boxed{203}");
  for (int r = 0; r < 8; ++r) run.add("aime25", "033", r < 6 ? "Answer: 33" : "no idea");
  // gpqa_diamond: 2 questions x 5 repeats, 7 of 10 right -> 1.4 of 2.
  for (int r = 0; r < 5; ++r) run.add("gpqa_diamond", "C", r < 4 ? "C" : "Answer: B");
  for (int r = 0; r < 5; ++r) run.add("gpqa_diamond", "A", r < 3 ? "**A**" : "D");
  // livecodebench_v6: a question the benchmark lacks scores 0.
  const std::string right = "```python\nA, B = map(int, input().split())\nprint((A + B - 1) // B)\n```";
  const std::string wrong = "```python\nA, B = map(int, input().split())\nprint(A // B)\n```";
  for (int r = 0; r < 3; ++r) run.add("livecodebench_v6", "abc302_a", r < 2 ? right : wrong);
  for (int r = 0; r < 3; ++r) run.add("livecodebench_v6", "missing_question", right);  // not in the benchmark
  run.add("livecodebench_v6", "abc302_a", right);  // one more right one: 3 of 7 -> 3/3 of 7/3
  AccuracyLogEntry stray = run.log.back();
  stray.qsl_idx = 999;  // outside the reference: skipped with a warning
  run.log.push_back(stray);

  std::vector<std::string> warnings;
  std::vector<ModelOutput> outputs =
      outputs_from_log(run.log, run.reference.size(), synthetic_detokenize, Rules::gpt_oss, warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("qsl_idx 999 out of range"), std::string::npos);

  LcbRunnerOptions lcb;
  lcb.timeout_seconds = 10;
  const LcbRunner runner(lcb);
  const SampleScorer scorer(Rules::gpt_oss, excerpt_problems(), &runner);
  OfflineResult result = score_outputs(std::move(outputs), run.reference, scorer, Rules::gpt_oss);
  result.warnings = warnings;
  ASSERT_EQ(result.tallies.size(), 3u);
  EXPECT_EQ(result.tallies[0].dataset, "aime25");
  EXPECT_EQ(result.tallies[0].correct, 12);
  EXPECT_EQ(result.tallies[1].correct, 7);
  EXPECT_EQ(result.tallies[2].correct, 3);
  EXPECT_EQ(result.tallies[2].total, 7);
  const double expected = (12.0 / 8 + 7.0 / 5 + 3.0 / 3) / (16.0 / 8 + 10.0 / 5 + 7.0 / 3) * 100;
  EXPECT_NEAR(result.exact_match, expected, 1e-9);
  const std::string text = offline_report_text(result);
  EXPECT_NE(text.find(fmt::format("'exact_match': {:.3f}", expected)), std::string::npos) << text;
  EXPECT_NE(text.find("warning: qsl_idx 999"), std::string::npos);
  EXPECT_NE(text.find("MLPerf target (gpt-oss-120b): exact_match >= 82.2987: FAIL"), std::string::npos);
  const nlohmann::json json = offline_result_json(result);
  EXPECT_EQ(json["detailed_results"].size(), 33u);
  EXPECT_EQ(json["detailed_results"][29]["evaluation_details"], "Question ID 'missing_question' not found in benchmark");
  EXPECT_EQ(json["summary"]["per_dataset"]["gpqa_diamond"]["total"], 10);
}

TEST(OfflineScoring, DeepSeekSkipsDuplicatesAndAveragesSamples) {
  SyntheticRun run;
  run.add("math500", "\\frac{1}{2}", "so \\boxed{0.5}", 2);  // logged twice: counted once
  run.add("math500", "3", "\\boxed{4}");
  run.add("mmlu_pro", "J", "ANSWER: J");
  run.add("AIME2024", "7", "\\boxed{7}");  // the name is lower-cased; "aime" picks the scorer
  std::vector<std::string> warnings;
  std::vector<ModelOutput> outputs =
      outputs_from_log(run.log, run.reference.size(), synthetic_detokenize, Rules::deepseek_r1, warnings);
  ASSERT_EQ(outputs.size(), 4u);
  const SampleScorer scorer(Rules::deepseek_r1, {}, nullptr);
  const OfflineResult result = score_outputs(std::move(outputs), run.reference, scorer, Rules::deepseek_r1);
  EXPECT_DOUBLE_EQ(result.exact_match, 75.0);
  double tokens = 0;
  for (const ModelOutput& o : result.outputs) tokens += static_cast<double>(o.token_count);
  EXPECT_DOUBLE_EQ(result.tokens_per_sample, tokens / 4);
  const std::string text = offline_report_text(result);
  EXPECT_NE(text.find("{'exact_match': 75.0, 'tokens_per_sample': "), std::string::npos);
  EXPECT_NE(text.find("MLPerf target (deepseek-r1): exact_match >= 80.5446: FAIL; tokens per sample in "
                      "[3497.6047, 4274.8501]: FAIL"),
            std::string::npos)
      << text;
}

TEST(OfflineScoring, UnknownDatasetsAndBadRecordsAreErrors) {
  SyntheticRun run;
  run.add("healthbench", "x", "y");
  std::vector<std::string> warnings;
  const SampleScorer scorer(Rules::gpt_oss, {}, nullptr);
  EXPECT_THROW(score_outputs(outputs_from_log(run.log, 1, synthetic_detokenize, Rules::gpt_oss, warnings),
                             run.reference, scorer, Rules::gpt_oss),
               Error);
  run.log[0].data = "ABC";  // not whole tokens
  EXPECT_THROW(outputs_from_log(run.log, 1, synthetic_detokenize, Rules::gpt_oss, warnings), Error);
}

TEST(AccuracyLog, ReadsArraysLinesAndConcatenatedRecords) {
  const std::string dir = moeserve::testing::temp_dir("accuracy-log");
  const std::vector<int32_t> tokens = {200005, 7, -1};
  const std::string record = accuracy_log_record(3, 9, tokens);
  EXPECT_EQ(hex_to_int32(int32_to_hex(tokens)), tokens);
  EXPECT_EQ(int32_to_hex(std::vector<int32_t>{1}), "01000000");
  for (const std::string& text : {"[\n" + record + ",\n" + record + "\n]\n", record + "\n" + record + "\n",
                                  record + record}) {
    std::ofstream(dir + "/log.json") << text;
    const std::vector<AccuracyLogEntry> entries = read_accuracy_log(dir + "/log.json");
    ASSERT_EQ(entries.size(), 2u) << text;
    EXPECT_EQ(entries[1].seq_id, 3);
    EXPECT_EQ(entries[1].qsl_idx, 9);
    EXPECT_EQ(entries[1].token_count, 3);
    EXPECT_EQ(hex_to_int32(entries[1].data), tokens);
  }
  std::ofstream(dir + "/bad.json") << "[{\"seq_id\": 1}]";
  EXPECT_THROW(read_accuracy_log(dir + "/bad.json"), Error);
  EXPECT_EQ(hex_to_int32("0100 0000 02", true), std::vector<int32_t>{1});
  EXPECT_THROW(hex_to_int32("010000", false), Error);
  EXPECT_THROW(hex_to_int32("zz000000"), Error);
}

TEST(Reference, LoadsJsonLinesAndParquet) {
  const std::string dir = moeserve::testing::temp_dir("reference");
  std::ofstream(dir + "/ref.jsonl") << "{\"dataset\": \"aime25\", \"ground_truth\": \"70\"}\n\n"
                                       "{\"dataset\": \"gpqa_diamond\", \"ground_truth\": \"B\", \"other\": 1}\n";
  const std::vector<ReferenceRow> rows = load_reference(dir + "/ref.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].ground_truth, "B");
  // The MLPerf parquet's columns, in a file the bench's reader tests use (tests/bench/fixtures/parquet).
  const std::vector<ReferenceRow> parquet =
      load_reference(MOESERVE_SOURCE_DIR "/tests/bench/fixtures/parquet/arrow_v1_snappy_dictionary.parquet");
  ASSERT_EQ(parquet.size(), 12u);
  EXPECT_EQ(parquet[1].dataset, "gpqa_diamond");
  EXPECT_EQ(parquet[5].ground_truth, "answer-5");
  std::ofstream(dir + "/bad.jsonl") << "{\"dataset\": \"aime25\"}\n";
  EXPECT_THAT([&] { load_reference(dir + "/bad.jsonl"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("bad.jsonl:1")));
}

}  // namespace
}  // namespace moeserve::eval
