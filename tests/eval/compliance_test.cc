// TEST06, TEST07 and TEST09 on logs built to sit just inside and just outside their limits, and the verify
// files in the layout the submission checker reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "eval/compliance.h"
#include "eval/offline_scoring.h"
#include "eval_test_util.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

AccuracyLogEntry record(int64_t qsl_idx, const std::vector<int32_t>& tokens,
                        std::optional<std::vector<int32_t>> first = std::nullopt) {
  AccuracyLogEntry e;
  e.seq_id = qsl_idx;
  e.qsl_idx = qsl_idx;
  e.data = int32_to_hex(tokens);
  e.token_count = static_cast<int64_t>(tokens.size());
  if (first) e.token_data = int32_to_hex(*first);
  return e;
}

// n records whose lengths sum to total (as evenly as possible).
std::vector<AccuracyLogEntry> log_with_total_tokens(int n, int64_t total) {
  std::vector<AccuracyLogEntry> log;
  for (int i = 0; i < n; ++i) {
    const int64_t length = total / n + (i < total % n ? 1 : 0);
    log.push_back(record(i, std::vector<int32_t>(static_cast<size_t>(length), 42)));
  }
  return log;
}

TEST(Test09, PassesOnlyWithinTenPercentOfTheReferenceLength) {
  // 50 records: a mean of 1150.38 needs 57519 tokens, 1406.02 needs 70301.
  EXPECT_TRUE(run_test09(log_with_total_tokens(50, 57519), kTest09MinOutputTokens, kTest09MaxOutputTokens).passed);
  EXPECT_FALSE(run_test09(log_with_total_tokens(50, 57518), kTest09MinOutputTokens, kTest09MaxOutputTokens).passed);
  EXPECT_TRUE(run_test09(log_with_total_tokens(50, 70301), kTest09MinOutputTokens, kTest09MaxOutputTokens).passed);
  const ComplianceResult over = run_test09(log_with_total_tokens(50, 70302), kTest09MinOutputTokens,
                                           kTest09MaxOutputTokens);
  EXPECT_FALSE(over.passed);
  EXPECT_EQ(over.verify_file, "verify_output_len.txt");
  EXPECT_NE(over.report.find("Mean output tokens: 1406.04\n"), std::string::npos) << over.report;
  EXPECT_NE(over.report.find("Min threshold: 1150.38\nMax threshold: 1406.02\n"), std::string::npos);
  EXPECT_NE(over.report.find("Max check pass: False\n\nTEST FAIL\n"), std::string::npos);
}

TEST(Test09, RecordsWithoutDataCountZero) {
  std::vector<AccuracyLogEntry> log = log_with_total_tokens(2, 2000);
  log.push_back(AccuracyLogEntry{});
  const ComplianceResult r = run_test09(log, 0, 1e9);
  EXPECT_NE(r.report.find("Total samples: 3\nMean output tokens: 666.67\nMin output tokens: 0\nMax output tokens: 1000\n"),
            std::string::npos)
      << r.report;
}

// A GPQA compliance log with `correct` of 1000 samples right, scored as TEST07 scores it.
std::string gpqa_scoring_output(int correct) {
  std::vector<ReferenceRow> reference;
  std::vector<ModelOutput> outputs;
  for (int i = 0; i < 1000; ++i) {
    reference.push_back({"gpqa_diamond", "B"});
    outputs.push_back({i, i, testing::harmony_reply(i < correct ? "Answer: B" : "Answer: C"), 3});
  }
  const SampleScorer scorer(Rules::gpt_oss, {}, nullptr);
  return offline_report_text(score_outputs(outputs, reference, scorer, Rules::gpt_oss));
}

TEST(Test07, PassesAtTheThresholdAndFailsBelowIt) {
  // One dataset: exact_match is the plain rate. 607/1000 = 60.700 >= 60.698; 606/1000 = 60.600 < 60.698.
  const ComplianceResult pass = run_test07(gpqa_scoring_output(607), kTest07AccuracyThreshold);
  EXPECT_TRUE(pass.passed) << pass.report;
  EXPECT_NE(pass.report.find("Accuracy score: 60.7\nAccuracy threshold: 60.698\nAccuracy check pass: True\nTEST PASS\n"),
            std::string::npos)
      << pass.report;
  const ComplianceResult fail = run_test07(gpqa_scoring_output(606), kTest07AccuracyThreshold);
  EXPECT_FALSE(fail.passed);
  EXPECT_NE(fail.report.find("TEST FAIL\n"), std::string::npos);
  EXPECT_TRUE(run_test07("'exact_match': 60.698", kTest07AccuracyThreshold).passed);
  EXPECT_FALSE(run_test07("'exact_match': 60.697", kTest07AccuracyThreshold).passed);
  const ComplianceResult none = run_test07("no score here", kTest07AccuracyThreshold);
  EXPECT_FALSE(none.passed);
  EXPECT_NE(none.report.find("Error: Could not parse accuracy score\nTEST FAIL\n"), std::string::npos);
}

TEST(Test06, ChecksEosFirstTokenAndLength) {
  const Test06Options server{"Server", 1, 4};
  const Test06Options offline{"Offline", 1, 4};
  const std::vector<AccuracyLogEntry> good = {record(0, {5, 6, 1}, std::vector<int32_t>{5}),
                                              record(1, {7, 8}, std::vector<int32_t>{7})};
  const ComplianceResult r = run_test06(good, server);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.report,
            "First token check pass: True\nEOS check pass: True\nSample length check pass: True\n"
            "TEST06 verification complete\n");
  EXPECT_EQ(run_test06(good, offline).report.substr(0, 34), "First token check pass: Skipped\nEO");

  std::vector<AccuracyLogEntry> two_eos = good;
  two_eos.push_back(record(2, {9, 1, 1}, std::vector<int32_t>{9}));
  const ComplianceResult eos = run_test06(two_eos, server);
  EXPECT_FALSE(eos.passed);
  EXPECT_NE(eos.report.find("EOS check pass: False\n"), std::string::npos);
  EXPECT_NE(eos.report.find("TEST06 verification failed\n"), std::string::npos);
  // Only indices from 1 up count, as in the reference: [EOS, EOS] passes.
  EXPECT_TRUE(run_test06({record(0, {1, 1}, std::vector<int32_t>{1})}, server).passed);

  std::vector<AccuracyLogEntry> wrong_first = good;
  wrong_first[1].token_data = int32_to_hex(std::vector<int32_t>{8});
  EXPECT_FALSE(run_test06(wrong_first, server).passed);
  EXPECT_TRUE(run_test06(wrong_first, offline).passed);  // Offline does not compare first tokens

  std::vector<AccuracyLogEntry> wrong_count = good;
  wrong_count[0].token_count = 2;
  EXPECT_NE(run_test06(wrong_count, offline).report.find("Sample length check pass: False"), std::string::npos);
  EXPECT_THROW(run_test06(good, Test06Options{"Batch", 1, 4}), Error);
}

TEST(Compliance, WritesTheDirectoriesTheCheckerReads) {
  const std::string compliance = moeserve::testing::temp_dir("compliance-in");
  const std::string output = moeserve::testing::temp_dir("compliance-out");
  write_text_file(compliance + "/mlperf_log_accuracy.json", "[]");
  write_text_file(compliance + "/mlperf_log_detail.txt", "detail");
  const ComplianceResult r = run_test09(log_with_total_tokens(2, 2600), kTest09MinOutputTokens, kTest09MaxOutputTokens);
  write_compliance_dir("TEST09", r, compliance, output);
  EXPECT_NE(read_text_file(output + "/TEST09/verify_output_len.txt").find("TEST PASS"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(output + "/TEST09/accuracy/mlperf_log_accuracy.json"));
  EXPECT_EQ(read_text_file(output + "/TEST09/performance/run_1/mlperf_log_detail.txt"), "detail");
  EXPECT_FALSE(std::filesystem::exists(output + "/TEST09/performance/run_1/mlperf_log_summary.txt"));
  write_compliance_dir("TEST06", run_test06({}, Test06Options{"Offline", 1, 4}), compliance, output);
  EXPECT_TRUE(std::filesystem::exists(output + "/TEST06/verify_accuracy.txt"));
  EXPECT_FALSE(std::filesystem::exists(output + "/TEST06/performance"));
}

TEST(Compliance, ReadsAuditConfigSettings) {
  const std::string dir = moeserve::testing::temp_dir("audit");
  write_text_file(dir + "/audit.config",
                  "# TEST09\n*.*.mode = 2\n*.*.test09_min_output_tokens = 1150.38\n"
                  "*.*.test09_max_output_tokens = 1406.02  # +10%\ngpt-oss-120b.Server.test07_accuracy_threshold=60.698\n"
                  "not a setting\nshort.key = 1\n");
  const std::map<std::string, std::string> settings = read_audit_config(dir + "/audit.config");
  EXPECT_EQ(settings.at("test09_min_output_tokens"), "1150.38");
  EXPECT_EQ(settings.at("test09_max_output_tokens"), "1406.02");
  EXPECT_EQ(settings.at("test07_accuracy_threshold"), "60.698");
  EXPECT_EQ(settings.count("key"), 0u);  // two-part keys are not settings
}

}  // namespace
}  // namespace moeserve::eval
