#include "eval/compliance.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "eval/python_text.h"
#include "eval/regex.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

const char* python_bool(bool value) { return value ? "True" : "False"; }


// A record's tokens as the reference decodes them (numpy.frombuffer of the given width): none when the bytes do
// not fill whole tokens, which makes numpy raise.
std::optional<std::vector<int64_t>> tokens_of(const std::string& hex, int width) {
  std::vector<int32_t> words;
  try {
    words = hex_to_int32(hex, false);
  } catch (const Error&) {
    return std::nullopt;
  }
  std::vector<int64_t> tokens;
  if (width == 4) {
    tokens.assign(words.begin(), words.end());
  } else {
    if (words.size() % 2 != 0) return std::nullopt;
    for (size_t i = 0; i < words.size(); i += 2) {
      tokens.push_back(static_cast<int64_t>((static_cast<uint64_t>(static_cast<uint32_t>(words[i + 1])) << 32) |
                                            static_cast<uint32_t>(words[i])));
    }
  }
  return tokens;
}

bool eos_check(const std::vector<AccuracyLogEntry>& entries, const Test06Options& o) {
  for (const AccuracyLogEntry& e : entries) {
    const auto data = tokens_of(e.data, o.token_bytes);
    if (!data) return false;  // the reference's exception handler: "EOS check pass: False"
    int eos = 0;
    for (size_t i = data->size() - 1; data->size() > 1 && i > 0; --i) {
      if ((*data)[i] == o.eos_token_id) ++eos;
      if (eos >= 2) return false;
      if ((*data)[i] != o.eos_token_id) break;
    }
  }
  return true;
}

bool first_token_check(const std::vector<AccuracyLogEntry>& entries, const Test06Options& o) {
  for (const AccuracyLogEntry& e : entries) {
    if (!e.token_data) return false;  // a KeyError in the reference, caught: False
    const auto data = tokens_of(e.data, o.token_bytes);
    const auto first = tokens_of(*e.token_data, o.token_bytes);
    if (!data || !first) return false;
    for (size_t i = 0; i < std::min(data->size(), first->size()); ++i) {
      if ((*data)[i] != (*first)[i]) return false;
    }
  }
  return true;
}

bool sample_length_check(const std::vector<AccuracyLogEntry>& entries, const Test06Options& o) {
  for (const AccuracyLogEntry& e : entries) {
    const auto data = tokens_of(e.data, o.token_bytes);
    if (!data || !e.token_count || static_cast<int64_t>(data->size()) != *e.token_count) return false;
  }
  return true;
}

void copy_if_present(const std::filesystem::path& from, const std::filesystem::path& to_dir) {
  if (!std::filesystem::exists(from)) return;
  std::filesystem::copy_file(from, to_dir / from.filename(), std::filesystem::copy_options::overwrite_existing);
}

}  // namespace

std::map<std::string, std::string> read_audit_config(const std::string& path) {
  std::map<std::string, std::string> settings;
  std::istringstream in(read_text_file(path));
  for (std::string line; std::getline(in, line);) {
    std::string_view l = python_strip(line);
    if (l.empty() || l.front() == '#') continue;
    const size_t equals = l.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view key = python_strip(l.substr(0, equals));
    std::string_view value = l.substr(equals + 1);
    value = python_strip(value.substr(0, value.find('#')));
    const std::vector<std::string_view> parts = python_split(key, ".");
    if (parts.size() >= 3) settings[std::string(parts.back())] = std::string(value);
  }
  return settings;
}

ComplianceResult run_test06(const std::vector<AccuracyLogEntry>& entries, const Test06Options& options) {
  MOESERVE_CHECK(options.token_bytes == 4 || options.token_bytes == 8, "TEST06: tokens are int32 or int64");
  static constexpr std::array<std::string_view, 5> scenarios = {"Offline", "Server", "Interactive", "SingleStream",
                                                                "MultiStream"};
  MOESERVE_CHECK(std::find(scenarios.begin(), scenarios.end(), options.scenario) != scenarios.end(),
                 "TEST06: unknown scenario \"{}\"", options.scenario);
  const bool eos = eos_check(entries, options);
  const bool need_first_token = options.scenario != "Offline";
  const bool first_token = !need_first_token || first_token_check(entries, options);
  const bool length = sample_length_check(entries, options);
  ComplianceResult r;
  r.passed = eos && first_token && length;
  r.verify_file = "verify_accuracy.txt";
  r.report = fmt::format("First token check pass: {}\n", need_first_token ? python_bool(first_token) : "Skipped");
  r.report += fmt::format("EOS check pass: {}\n", python_bool(eos));
  r.report += fmt::format("Sample length check pass: {}\n", python_bool(length));
  r.report += r.passed ? "TEST06 verification complete\n" : "TEST06 verification failed\n";
  r.summary = fmt::format("TEST06 on {} records ({}, EOS token {})\n{}{}\n", entries.size(), options.scenario,
                          options.eos_token_id, r.report, r.passed ? "TEST PASS" : "TEST FAIL");
  return r;
}

ComplianceResult run_test07(const std::string& scoring_output, double threshold) {
  static const Regex score_pattern("'exact_match':\\s*([\\d.]+)");
  std::optional<double> score;
  if (auto m = score_pattern.search(scoring_output)) score = std::strtod(std::string(m->group(1)).c_str(), nullptr);
  ComplianceResult r;
  r.passed = score && *score >= threshold;
  r.verify_file = "verify_accuracy.txt";
  const std::string rule(80, '=');
  r.report = scoring_output + "\n" + rule + "\nTEST07 Verification Summary\n" + rule + "\n";
  if (score) {
    r.report += fmt::format("Accuracy score: {}\nAccuracy threshold: {}\nAccuracy check pass: {}\n",
                            python_float_text(*score), python_float_text(threshold), python_bool(r.passed));
  } else {
    r.report += "Error: Could not parse accuracy score\n";
  }
  r.report += r.passed ? "TEST PASS\n" : "TEST FAIL\n";
  r.summary = score ? fmt::format("TEST07 accuracy {} (threshold {})\n{}", python_float_text(*score), python_float_text(threshold),
                                  r.passed ? "TEST PASS" : "TEST FAIL")
                    : "TEST07: no 'exact_match' in the scoring output\nTEST FAIL";
  return r;
}

ComplianceResult run_test09(const std::vector<AccuracyLogEntry>& entries, double min_tokens, double max_tokens) {
  std::vector<int64_t> lengths;
  for (const AccuracyLogEntry& e : entries) {
    int64_t length = 0;  // a record without data, or with data that is not hex, counts 0 (as a warning there)
    try {
      length = static_cast<int64_t>(hex_to_int32(e.data, true).size());
    } catch (const Error&) {
    }
    lengths.push_back(length);
  }
  MOESERVE_CHECK(!lengths.empty(), "TEST09: no entries found in the accuracy log");
  double sum = 0;
  for (int64_t n : lengths) sum += static_cast<double>(n);
  const double mean = sum / static_cast<double>(lengths.size());
  double squares = 0;
  for (int64_t n : lengths) squares += (static_cast<double>(n) - mean) * (static_cast<double>(n) - mean);
  const double std_dev = std::sqrt(squares / static_cast<double>(lengths.size()));
  const int64_t shortest = *std::min_element(lengths.begin(), lengths.end());
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const bool min_pass = mean >= min_tokens;
  const bool max_pass = mean <= max_tokens;
  ComplianceResult r;
  r.passed = min_pass && max_pass;
  r.verify_file = "verify_output_len.txt";
  const std::string rule(80, '=');
  r.report = fmt::format("{}\nTEST09: Verify Output Token Length in Performance Mode\n{}\n\n", rule, rule);
  r.report += fmt::format("Output Token Length Statistics\n{}\n", std::string(40, '-'));
  r.report += fmt::format("Total samples: {}\nMean output tokens: {:.2f}\nMin output tokens: {}\nMax output tokens: {}\n",
                          lengths.size(), mean, shortest, longest);
  r.report += fmt::format("Std deviation: {:.2f}\n", std_dev);
  r.report += fmt::format("\n{}\nVerification Results\n{}\n", rule, rule);
  r.report += fmt::format("Mean output tokens: {:.2f}\nMin threshold: {}\nMax threshold: {}\n", mean,
                          python_float_text(min_tokens), python_float_text(max_tokens));
  r.report += fmt::format("Min check pass: {}\nMax check pass: {}\n", python_bool(min_pass), python_bool(max_pass));
  r.report += fmt::format("\n{}\n", r.passed ? "TEST PASS" : "TEST FAIL");
  r.summary = fmt::format("TEST09 mean output tokens {:.2f} over {} samples (bounds [{}, {}])\n{}", mean,
                          lengths.size(), python_float_text(min_tokens), python_float_text(max_tokens),
                          r.passed ? "TEST PASS" : "TEST FAIL");
  return r;
}

void write_compliance_dir(const std::string& test, const ComplianceResult& result, const std::string& compliance_dir,
                          const std::string& output_dir) {
  namespace fs = std::filesystem;
  const fs::path test_dir = fs::path(output_dir) / test;
  try {
    fs::create_directories(test_dir / "accuracy");
    write_text_file((test_dir / result.verify_file).string(), result.report);
    copy_if_present(fs::path(compliance_dir) / "mlperf_log_accuracy.json", test_dir / "accuracy");
    if (test != "TEST06") {
      const fs::path run = test_dir / "performance" / "run_1";
      fs::create_directories(run);
      copy_if_present(fs::path(compliance_dir) / "mlperf_log_summary.txt", run);
      copy_if_present(fs::path(compliance_dir) / "mlperf_log_detail.txt", run);
    }
  } catch (const fs::filesystem_error& e) {
    fail("{}: cannot write {}: {}", test, test_dir.string(), e.what());
  }
}

}  // namespace moeserve::eval
