// MLPerf compliance checks on an accuracy log, with the verify files the submission checker reads
// (tools/submission/submission_checker/checks/compliance_check.py @b66003e1):
//
//   TEST06 (compliance/TEST06/run_verification.py; DeepSeek-R1 and other LLMs): for every record,
//     EOS check:          the output ends in at most one EOS token (trailing EOS counted from the end down to
//                         index 1, as the reference's `while i > 0` loop does);
//     first token check:  (not Offline) data begins with token_data, pairwise over the shorter of the two;
//     sample length:      the number of tokens in data equals token_count.
//     Writes TEST06/verify_accuracy.txt ("First token check pass: True|False|Skipped", "EOS check pass: ...",
//     "Sample length check pass: ...", "TEST06 verification complete|failed") and a copy of the log in
//     TEST06/accuracy/.
//   TEST07 (compliance/TEST07/run_verification.py; GPT-OSS): the accuracy of a performance-mode run on the GPQA
//     compliance set, scored as eval_mlperf_accuracy.py scores it, must reach test07_accuracy_threshold
//     (60.698). Writes TEST07/verify_accuracy.txt: the scoring output, then the summary block ending "TEST PASS"
//     or "TEST FAIL".
//   TEST09 (compliance/TEST09/run_verification.py; GPT-OSS): the mean number of output tokens over all records
//     (tokens counted from data, 4 bytes each, a record without data counting 0) must lie within
//     [test09_min_output_tokens, test09_max_output_tokens] = [1150.38, 1406.02], +-10% of 1278.20. Writes
//     TEST09/verify_output_len.txt.
//   TEST07 and TEST09 also copy the log to TESTxx/accuracy/ and mlperf_log_summary.txt / mlperf_log_detail.txt,
//   where present, to TESTxx/performance/run_1/.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/accuracy_log.h"

namespace moeserve::eval {

// Thresholds MLPerf ships in compliance/TESTxx/gpt-oss-120b/audit.config.
inline constexpr double kTest07AccuracyThreshold = 60.698;
inline constexpr double kTest09MinOutputTokens = 1150.38;
inline constexpr double kTest09MaxOutputTokens = 1406.02;

// An audit.config: "model.scenario.setting = value" lines (# comments, inline ones too); the settings by their
// last dotted part.
std::map<std::string, std::string> read_audit_config(const std::string& path);

struct ComplianceResult {
  bool passed = false;
  std::string verify_file;  // verify_accuracy.txt or verify_output_len.txt
  std::string report;       // its content
  std::string summary;      // what to print: the numbers and TEST PASS / TEST FAIL
};

struct Test06Options {
  std::string scenario;  // Offline, Server, Interactive, SingleStream, MultiStream
  int64_t eos_token_id = 1;  // DeepSeek-R1's <｜end▁of▁sentence｜>
  int token_bytes = 4;       // --dtype int32 (4) or int64 (8)
};
ComplianceResult run_test06(const std::vector<AccuracyLogEntry>& entries, const Test06Options& options);

// scoring_output: what the accuracy scoring printed (it must contain 'exact_match': X).
ComplianceResult run_test07(const std::string& scoring_output, double threshold);

ComplianceResult run_test09(const std::vector<AccuracyLogEntry>& entries, double min_tokens, double max_tokens);

// Writes output_dir/<test>/ as the reference scripts lay it out: the verify file, accuracy/ with the log, and
// (TEST07, TEST09) performance/run_1/ with the summary and detail logs found in compliance_dir.
void write_compliance_dir(const std::string& test, const ComplianceResult& result, const std::string& compliance_dir,
                          const std::string& output_dir);

}  // namespace moeserve::eval
