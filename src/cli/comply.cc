// moeserve comply TEST06|TEST07|TEST09: MLPerf's compliance checks on a compliance run's
// mlperf_log_accuracy.json (in --compliance-dir), printing TEST PASS or TEST FAIL with the numbers and writing
// the verify files where the submission checker looks (--output-dir/TESTxx/). Exits 1 on TEST FAIL, 2 when it
// cannot check (cli/exit_codes.h).
#include <fmt/core.h>

#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "eval/compliance.h"
#include "eval/offline_scoring.h"
#include "util/error.h"

namespace moeserve::cli {
namespace {

using namespace moeserve::eval;

struct ComplyArgs {
  std::string test;
  std::string compliance_dir;
  std::string output_dir;
  std::string audit_config;
  // TEST07
  std::string reference;
  std::string tokenizer;
  std::optional<double> accuracy_threshold;
  // TEST09
  std::optional<double> min_output_tokens;
  std::optional<double> max_output_tokens;
  // TEST06
  std::string scenario;
  int64_t eos_token_id = 1;
  std::string dtype = "int32";
};

// A threshold from the command line, else audit.config, else MLPerf's GPT-OSS value.
double threshold(const std::optional<double>& given, const std::map<std::string, std::string>& audit,
                 const std::string& setting, double gpt_oss_default) {
  if (given) return *given;
  auto it = audit.find(setting);
  if (it == audit.end()) return gpt_oss_default;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    fail("comply: audit.config's {} is not a number: \"{}\"", setting, it->second);
  }
}

ComplianceResult run(const ComplyArgs& args, const std::vector<AccuracyLogEntry>& log) {
  const std::map<std::string, std::string> audit =
      args.audit_config.empty() ? std::map<std::string, std::string>{} : read_audit_config(args.audit_config);
  if (args.test == "TEST06") {
    MOESERVE_CHECK(!args.scenario.empty(), "comply TEST06: --scenario is required");
    return run_test06(log, Test06Options{args.scenario, args.eos_token_id, args.dtype == "int64" ? 8 : 4});
  }
  if (args.test == "TEST09") {
    return run_test09(log, threshold(args.min_output_tokens, audit, "test09_min_output_tokens", kTest09MinOutputTokens),
                      threshold(args.max_output_tokens, audit, "test09_max_output_tokens", kTest09MaxOutputTokens));
  }
  MOESERVE_CHECK(!args.reference.empty(), "comply TEST07: --reference (the GPQA compliance set) is required");
  const std::vector<ReferenceRow> reference = load_reference(args.reference);
  std::vector<std::string> warnings;
  std::vector<ModelOutput> outputs =
      outputs_from_log(log, reference.size(), gpt_oss_detokenizer(args.tokenizer), Rules::gpt_oss, warnings);
  const SampleScorer scorer(Rules::gpt_oss, {}, nullptr);
  OfflineResult scored = score_outputs(std::move(outputs), reference, scorer, Rules::gpt_oss);
  scored.warnings = std::move(warnings);
  return run_test07(offline_report_text(scored),
                    threshold(args.accuracy_threshold, audit, "test07_accuracy_threshold", kTest07AccuracyThreshold));
}

}  // namespace

void register_comply(CLI::App& app) {
  auto args = std::make_shared<ComplyArgs>();
  auto* cmd = app.add_subcommand("comply", "MLPerf compliance checks TEST06, TEST07, TEST09 and their verify files");
  cmd->add_option("test", args->test, "the test")->required()->check(CLI::IsMember({"TEST06", "TEST07", "TEST09"}));
  cmd->add_option("-c,--compliance-dir", args->compliance_dir, "the compliance run's logs (mlperf_log_accuracy.json)")
      ->required();
  cmd->add_option("-o,--output-dir", args->output_dir, "where TESTxx/ with the verify files is written")->required();
  cmd->add_option("--audit-config", args->audit_config, "audit.config with the test's thresholds");
  cmd->add_option("--reference", args->reference, "TEST07: JSON lines {dataset, ground_truth} of the GPQA set");
  cmd->add_option("--tokenizer", args->tokenizer, "TEST07: tokenizer file or model directory (default: o200k)");
  cmd->add_option("--accuracy-threshold", args->accuracy_threshold, "TEST07: minimum exact_match (default 60.698)");
  cmd->add_option("--min-output-tokens", args->min_output_tokens, "TEST09: minimum mean (default 1150.38)");
  cmd->add_option("--max-output-tokens", args->max_output_tokens, "TEST09: maximum mean (default 1406.02)");
  cmd->add_option("--scenario", args->scenario, "TEST06: the scenario the run used")
      ->check(CLI::IsMember({"Offline", "Server", "Interactive", "SingleStream", "MultiStream"}));
  cmd->add_option("--eos-token-id", args->eos_token_id, "TEST06: the EOS token (DeepSeek-R1: 1)")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "TEST06: token width in the log")
      ->check(CLI::IsMember({"int32", "int64"}))
      ->capture_default_str();
  cmd->footer(exit_codes_help("TEST PASS", "TEST FAIL"));
  cmd->callback([args] {
    run_verdict_command([args] {
      const std::string path = args->compliance_dir + "/mlperf_log_accuracy.json";
      const std::vector<AccuracyLogEntry> log = read_accuracy_log(path);
      // An empty log is a compliance run that answered nothing (or the wrong directory): no test can pass on it.
      MOESERVE_CHECK(!log.empty(), "comply {}: {} has no entries: nothing to check", args->test, path);
      const ComplianceResult result = run(*args, log);
      write_compliance_dir(args->test, result, args->compliance_dir, args->output_dir);
      fmt::print("{}\nwrote {}/{}/{}\n", result.summary, args->output_dir, args->test, result.verify_file);
      return result.passed ? kExitValid : kExitInvalid;
    });
  });
}

}  // namespace moeserve::cli
