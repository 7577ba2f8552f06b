#include "bench/loadgen_logs.h"

#include <fmt/format.h>

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace moeserve::bench {
namespace {

// LoadGen's DoubleToString: fixed, 2 decimals by default.
std::string fixed(double value, int precision = 2) {
  std::ostringstream out;
  out.precision(precision);
  out << std::fixed << value;
  return out.str();
}

// How LoadGen's summary prints a double passed as a value: through an ostream, 6 significant digits.
std::string plain(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

class Lines {
 public:
  // LoadGen's summary(message, value): the message, the value, a newline.
  template <typename T>
  void add(const std::string& message, const T& value) {
    out_ << message << value << "\n";
  }
  void add(const std::string& message) { out_ << message << "\n"; }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

const char* yes_no(bool value) { return value ? "Yes" : "NO"; }

void add_percentile_block(Lines& lines, const LatencyStats& stats, const std::string& min_label,
                          const std::string& max_label, const std::string& mean_label,
                          const std::string& percentile_label) {
  lines.add(min_label, stats.min);
  lines.add(max_label, stats.max);
  lines.add(mean_label, stats.mean);
  for (size_t i = 0; i < kReportedPercentiles.size(); ++i)
    lines.add(fixed(kReportedPercentiles[i] * 100) + percentile_label, stats.percentiles[i]);
}

void add_verdict(Lines& lines, const EffectiveSettings& settings, const Verdict& v, uint64_t samples) {
  lines.add("Result is : ", v.valid ? "VALID" : "INVALID");
  if (v.has_perf_constraints) lines.add("  Performance constraints satisfied : ", yes_no(v.perf_constraints_met));
  lines.add("  Min duration satisfied : ", yes_no(v.min_duration_met));
  lines.add("  Min queries satisfied : ", yes_no(v.min_queries_met));
  lines.add("  Early stopping satisfied: ", yes_no(v.early_stopping_met));
  // Not a LoadGen line (LoadGen has no failed samples); MLPerf's checker reads the lines above and ignores it.
  if (v.samples_failed > 0)
    lines.add("  Samples succeeded : NO (" + failed_samples_text(v.samples_failed, samples) + ")");
  if (!v.valid) {
    lines.add("Recommendations:");
    if (!v.perf_constraints_met) lines.add(" * " + v.perf_constraints_recommendation);
    if (!v.min_duration_met) lines.add(" * " + v.min_duration_recommendation);
    if (!v.min_queries_met)
      lines.add(
          " * The test exited early, before enough queries were issued.\n"
          "   See the detailed log for why this may have occurred.");
    if (v.samples_failed > 0) lines.add(" * Fix what failed the samples: each one's error is in the detailed log.");
  }
  if (settings.scenario == Scenario::offline) return;
  if (!settings.requested.use_token_latencies) {
    lines.add("Early Stopping Result:");
    lines.add(v.early_stopping.recommendation);
  } else {
    lines.add("TTFT Early Stopping Result:");
    lines.add(v.early_stopping_ttft.recommendation);
    lines.add("TPOT Early Stopping Result:");
    lines.add(v.early_stopping_tpot.recommendation);
  }
}

void add_test_parameters(Lines& lines, const EffectiveSettings& e) {
  const TestSettings& r = e.requested;
  lines.add("samples_per_query : ", e.samples_per_query);
  lines.add("target_qps : ", plain(e.target_qps));
  if (!r.use_token_latencies) {
    lines.add("target_latency (ns): ", e.target_latency_ns);
  } else {
    lines.add("ttft_latency (ns): ", r.server_ttft_latency);
    lines.add("tpot_latency (ns): ", r.server_tpot_latency);
  }
  lines.add("max_async_queries : ", e.max_async_queries);
  lines.add("min_duration (ms): ", e.min_duration_ms);
  lines.add("max_duration (ms): ", e.max_duration_ms);
  lines.add("min_query_count : ", e.min_query_count);
  lines.add("max_query_count : ", e.max_query_count);
  lines.add("qsl_rng_seed : ", r.qsl_rng_seed);
  lines.add("sample_index_rng_seed : ", r.sample_index_rng_seed);
  lines.add("schedule_rng_seed : ", r.schedule_rng_seed);
  lines.add("accuracy_log_rng_seed : ", r.accuracy_log_rng_seed);
  lines.add("accuracy_log_probability : ", plain(r.accuracy_log_probability));
  lines.add("accuracy_log_sampling_target : ", r.accuracy_log_sampling_target);
  lines.add("print_timestamps : ", 0);
  lines.add("performance_issue_unique : ", int{r.performance_issue_unique});
  lines.add("performance_issue_same : ", int{r.performance_issue_same});
  lines.add("performance_issue_same_index : ", r.performance_issue_same_index);
  lines.add("performance_sample_count : ", e.performance_sample_count);
  lines.add("accuracy_sample_count : ", e.accuracy_sample_count);
  if (r.sample_concatenate_permutation)
    lines.add(
        "WARNING: sample_concatenate_permutation was set to true. \n"
        "Generated samples per query might be different as the one in the setting.\n"
        "Check the generated_samples_per_query line in the detailed log for the real\n"
        "samples_per_query value");
}

}  // namespace

std::string summary_text(const std::string& sut_name, const EffectiveSettings& settings, const PerformanceSummary& s,
                         const Verdict& v) {
  const Scenario scenario = settings.scenario;
  const bool tokens = settings.requested.use_token_latencies;
  const PerformanceResult& r = s.result;
  const double n = static_cast<double>(s.sample_count);
  Lines lines;
  lines.add(
      "================================================\nMLPerf Results Summary\n"
      "================================================");
  lines.add("SUT name : ", sut_name);
  lines.add("Scenario : ", scenario_name(scenario));
  lines.add("Mode     : ", test_mode_name(settings.mode));
  const std::string target_pct = fixed(settings.target_latency_percentile * 100, 1);
  switch (scenario) {
    case Scenario::single_stream:
      lines.add(target_pct + "th percentile latency (ns) : ", s.latency.at_target);
      if (tokens) lines.add(target_pct + "th first token percentile latency (ns) : ", s.first_token.at_target);
      break;
    case Scenario::server:
      lines.add("Completed samples per second    : ", fixed(s.completed_samples_per_second()));
      if (tokens) lines.add("Completed tokens per second: ", fixed(s.completed_tokens_per_second()));
      break;
    case Scenario::offline:
      lines.add("Samples per second: ", plain(s.samples_per_second()));
      if (tokens) lines.add("Tokens per second: ", plain(s.tokens_per_second()));
      break;
  }
  add_verdict(lines, settings, v, s.sample_count);
  lines.add(
      "\n================================================\nAdditional Stats\n"
      "================================================");
  const double mean_latency_s = static_cast<double>(s.latency.mean) * 1e-9;
  if (scenario == Scenario::single_stream) {
    lines.add("QPS w/ loadgen overhead         : " + fixed((n - 1) / r.final_query_issued_time));
    lines.add("QPS w/o loadgen overhead        : " + fixed(1 / mean_latency_s));
    lines.add("");
  } else if (scenario == Scenario::server) {
    lines.add("Scheduled samples per second : ", fixed(s.scheduled_samples_per_second()));
  }
  add_percentile_block(lines, s.latency, "Min latency (ns)                : ", "Max latency (ns)                : ",
                       "Mean latency (ns)               : ", " percentile latency (ns)   : ");
  if (tokens) {
    lines.add("");
    const double token_count = static_cast<double>(s.token_count);
    if (scenario == Scenario::single_stream) {
      lines.add("TPS w/ loadgen overhead         : " + fixed(token_count / r.final_query_issued_time));
      lines.add("TPS w/o loadgen overhead        : " + fixed(token_count / (mean_latency_s * n)));
    } else if (scenario == Scenario::server) {
      lines.add("Completed tokens per second                 : ", fixed(s.completed_tokens_per_second()));
    }
    if (scenario != Scenario::offline) {
      add_percentile_block(
          lines, s.first_token,
          "Min First Token latency (ns)                : ", "Max First Token latency (ns)                : ",
          "Mean First Token latency (ns)               : ", " percentile first token latency (ns)   : ");
      lines.add("");
      add_percentile_block(
          lines, s.tpot,
          "Min Time per Output Token (ns)                : ", "Max Time per Output Token (ns)                : ",
          "Mean Time per Output Token (ns)               : ", " percentile time to output token (ns)   : ");
    }
  }
  lines.add(
      "\n================================================\nTest Parameters Used\n"
      "================================================");
  add_test_parameters(lines, settings);
  return lines.text();
}

std::string summary_trailer(int warnings, int errors) {
  const std::string w = warnings == 0   ? "\nNo warnings encountered during test.\n"
                        : warnings == 1 ? "\n1 warning encountered. See detailed log.\n"
                                        : fmt::format("\n{} warnings encountered. See detailed log.\n", warnings);
  const std::string e = errors == 0   ? "\nNo errors encountered during test.\n"
                        : errors == 1 ? "\n1 ERROR encountered. See detailed log.\n"
                                      : fmt::format("\n{} ERRORS encountered. See detailed log.\n", errors);
  return w + e;
}

namespace {

// The run of settings LoadGen logs alike as requested_* and effective_* (they are never changed).
void log_seeds_and_audit_settings(DetailLog& log, const std::string& prefix, const TestSettings& r) {
  log.log(prefix + "qsl_rng_seed", r.qsl_rng_seed);
  log.log(prefix + "sample_index_rng_seed", r.sample_index_rng_seed);
  log.log(prefix + "schedule_rng_seed", r.schedule_rng_seed);
  log.log(prefix + "accuracy_log_rng_seed", r.accuracy_log_rng_seed);
  log.log(prefix + "accuracy_log_probability", r.accuracy_log_probability);
  log.log(prefix + "accuracy_log_sampling_target", r.accuracy_log_sampling_target);
  log.log(prefix + "print_timestamps", false);
  log.log(prefix + "performance_issue_unique", r.performance_issue_unique);
  log.log(prefix + "performance_issue_same", r.performance_issue_same);
  log.log(prefix + "performance_issue_same_index", r.performance_issue_same_index);
}

}  // namespace

void log_settings(DetailLog& log, const EffectiveSettings& e) {
  const TestSettings& r = e.requested;
  log.log("requested_scenario", scenario_name(r.scenario));
  log.log("requested_test_mode", test_mode_name(r.mode));
  switch (r.scenario) {
    case Scenario::single_stream:
      log.log("requested_single_stream_expected_latency_ns", r.single_stream_expected_latency_ns);
      log.log("requested_single_stream_target_latency_percentile", r.single_stream_target_latency_percentile);
      break;
    case Scenario::server:
      log.log("requested_server_target_qps", r.server_target_qps);
      log.log("requested_server_target_latency_ns", r.server_target_latency_ns);
      log.log("requested_server_target_latency_percentile", r.server_target_latency_percentile);
      log.log("requested_server_coalesce_queries", r.server_coalesce_queries);
      log.log("requested_server_max_async_queries", r.server_max_async_queries);
      break;
    case Scenario::offline:
      log.log("requested_offline_expected_qps", r.offline_expected_qps);
      break;
  }
  log.log("requested_min_duration_ms", r.min_duration_ms);
  log.log("requested_max_duration_ms", r.max_duration_ms);
  log.log("requested_min_query_count", r.min_query_count);
  log.log("requested_max_query_count", r.max_query_count);
  log_seeds_and_audit_settings(log, "requested_", r);
  log.log("requested_performance_sample_count_override", r.performance_sample_count_override);
  log.log("requested_accuracy_sample_count_override", r.accuracy_sample_count_override);
  log.log("requested_sample_concatenate_permutation", r.sample_concatenate_permutation);
  if (r.use_token_latencies) {
    log.log("requested_use_token_latencies", true);
    if (r.scenario != Scenario::offline) {
      log.log("requested_server_ttft_latency", r.server_ttft_latency);
      log.log("requested_server_tpot_latency", r.server_tpot_latency);
    }
  }
  log.log("effective_scenario", scenario_name(e.scenario));
  log.log("effective_test_mode", test_mode_name(e.mode));
  log.log("effective_samples_per_query", e.samples_per_query);
  log.log("effective_target_qps", e.target_qps);
  log.log("effective_target_latency_ns", e.target_latency_ns);
  log.log("effective_target_latency_percentile", e.target_latency_percentile);
  log.log("effective_max_async_queries", e.max_async_queries);
  log.log("effective_target_duration_ms", e.target_duration_ms);
  log.log("effective_min_duration_ms", e.min_duration_ms);
  log.log("effective_max_duration_ms", e.max_duration_ms);
  log.log("effective_min_query_count", e.min_query_count);
  log.log("effective_max_query_count", e.max_query_count);
  log.log("effective_min_sample_count", e.min_sample_count);
  log_seeds_and_audit_settings(log, "effective_", r);
  log.log("effective_performance_sample_count", e.performance_sample_count);
  log.log("effective_accuracy_sample_count", e.accuracy_sample_count);
  log.log("effective_sample_concatenate_permutation", r.sample_concatenate_permutation);
}

namespace {

void log_stats(DetailLog& log, const LatencyStats& stats, const std::string& prefix, const std::string& suffix) {
  for (size_t i = 0; i < kReportedPercentiles.size(); ++i)
    log.log(prefix + fixed(kReportedPercentiles[i] * 100) + suffix, stats.percentiles[i]);
}

std::string flattened(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

void log_results(DetailLog& log, const EffectiveSettings& settings, const PerformanceSummary& s, const Verdict& v) {
  const Scenario scenario = settings.scenario;
  const bool tokens = settings.requested.use_token_latencies;
  const PerformanceResult& r = s.result;
  const double n = static_cast<double>(s.sample_count);
  log.log("result_validity", v.valid ? "VALID" : "INVALID");
  if (v.has_perf_constraints) log.log("result_perf_constraints_met", v.perf_constraints_met);
  log.log("result_min_duration_met", v.min_duration_met);
  log.log("result_min_queries_met", v.min_queries_met);
  log.log("early_stopping_met", v.early_stopping_met);
  if (!v.valid) {
    std::string reason;
    if (!v.perf_constraints_met) reason += v.perf_constraints_recommendation + " ";
    if (!v.min_duration_met) reason += v.min_duration_recommendation + " ";
    if (!v.min_queries_met) reason += "The test exited early, before enough queries were issued.";
    if (v.samples_failed > 0)
      reason += (reason.empty() || reason.back() == ' ' ? "" : " ") +
                failed_samples_text(v.samples_failed, s.sample_count) + ".";
    log.log("result_invalid_reason", flattened(reason));
  }
  if (!tokens) {
    log.log("early_stopping_result", flattened(v.early_stopping.recommendation));
  } else {
    log.log("early_stopping_ttft_result", flattened(v.early_stopping_ttft.recommendation));
    log.log("early_stopping_tpot_result", flattened(v.early_stopping_tpot.recommendation));
  }
  log.log("result_query_count", r.queries_issued);
  if (scenario == Scenario::server) log.log("result_overlatency_query_count", s.overlatency_query_count);
  switch (scenario) {
    case Scenario::single_stream: {
      const EarlyStoppingResult& es =
          tokens ? (v.early_stopping_ttft.has_ss_estimate ? v.early_stopping_ttft : v.early_stopping_tpot)
                 : v.early_stopping;
      log.log("result_qps_with_loadgen_overhead", (n - 1) / r.final_query_issued_time);
      log.log("result_qps_without_loadgen_overhead", 1 / (static_cast<double>(s.latency.mean) * 1e-9));
      log.log("early_stopping_latency_ss", es.latency_estimate_ss);
      log.log("early_stopping_latency_ms", es.latency_estimate_ms);
      break;
    }
    case Scenario::server:
      log.log("result_scheduled_samples_per_sec", s.scheduled_samples_per_second());
      log.log("result_completed_samples_per_sec", s.completed_samples_per_second());
      break;
    case Scenario::offline:
      log.log("result_samples_per_second", s.samples_per_second());
      break;
  }
  log.log("result_min_latency_ns", s.latency.min);
  log.log("result_max_latency_ns", s.latency.max);
  log.log("result_mean_latency_ns", s.latency.mean);
  log_stats(log, s.latency, "result_", "_percentile_latency_ns");
  if (tokens && scenario != Scenario::offline) {
    log.log("result_first_token_min_latency_ns", s.first_token.min);
    log.log("result_first_token_max_latency_ns", s.first_token.max);
    log.log("result_first_token_mean_latency_ns", s.first_token.mean);
    log_stats(log, s.first_token, "result_first_token_", "_percentile_latency_ns");
    const double token_count = static_cast<double>(s.token_count);
    log.log("result_token_throughput_with_loadgen_overhead", token_count / r.final_query_issued_time);
    // LoadGen divides by the mean latency in ns here, not s; kept so the key reads as LoadGen's does.
    log.log("result_token_throughput", token_count / (static_cast<double>(s.latency.mean) * n));
    log_stats(log, s.tpot, "result_time_per_output_token_", "_percentile_ns");
    log.log("result_time_to_output_token_min", s.tpot.min);
    log.log("result_time_to_output_token_max", s.tpot.max);
    log.log("result_time_to_output_token_mean", s.tpot.mean);
    log.log("result_completed_tokens_per_second", s.completed_tokens_per_second());
  } else if (tokens) {
    log.log("result_tokens_per_second", s.tokens_per_second());
  }
}

}  // namespace moeserve::bench
