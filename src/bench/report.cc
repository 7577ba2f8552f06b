#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "bench/svg_plot.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

double seconds_since(TimePoint origin, TimePoint t) { return std::chrono::duration<double>(t - origin).count(); }

nlohmann::json stats_json(const LatencyStats& s) {
  nlohmann::json j = {{"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"at_target_percentile", s.at_target}};
  for (size_t i = 0; i < kReportedPercentiles.size(); ++i)
    j[fmt::format("p{:g}", kReportedPercentiles[i] * 100)] = s.percentiles[i];
  return j;
}

}  // namespace

nlohmann::json requested_settings_json(const TestSettings& r) {
  return {{"scenario", scenario_name(r.scenario)},
          {"mode", test_mode_name(r.mode)},
          {"server_target_qps", r.server_target_qps},
          {"offline_expected_qps", r.offline_expected_qps},
          {"single_stream_expected_latency_ns", r.single_stream_expected_latency_ns},
          {"server_target_latency_ns", r.server_target_latency_ns},
          {"server_target_latency_percentile", r.server_target_latency_percentile},
          {"single_stream_target_latency_percentile", r.single_stream_target_latency_percentile},
          {"server_max_async_queries", r.server_max_async_queries},
          {"server_coalesce_queries", r.server_coalesce_queries},
          {"sample_concatenate_permutation", r.sample_concatenate_permutation},
          {"min_duration_ms", r.min_duration_ms},
          {"max_duration_ms", r.max_duration_ms},
          {"min_query_count", r.min_query_count},
          {"max_query_count", r.max_query_count},
          {"qsl_rng_seed", r.qsl_rng_seed},
          {"sample_index_rng_seed", r.sample_index_rng_seed},
          {"schedule_rng_seed", r.schedule_rng_seed},
          {"accuracy_log_rng_seed", r.accuracy_log_rng_seed},
          {"accuracy_log_probability", r.accuracy_log_probability},
          {"accuracy_log_sampling_target", r.accuracy_log_sampling_target},
          {"performance_issue_unique", r.performance_issue_unique},
          {"performance_issue_same", r.performance_issue_same},
          {"performance_issue_same_index", r.performance_issue_same_index},
          {"performance_sample_count_override", r.performance_sample_count_override},
          {"accuracy_sample_count_override", r.accuracy_sample_count_override},
          {"use_token_latencies", r.use_token_latencies},
          {"server_ttft_latency_ns", r.server_ttft_latency},
          {"server_tpot_latency_ns", r.server_tpot_latency}};
}

namespace {

nlohmann::json settings_json(const EffectiveSettings& e) {
  return {{"requested", requested_settings_json(e.requested)},
          {"effective",
           {{"samples_per_query", e.samples_per_query},
            {"target_qps", e.target_qps},
            {"target_latency_ns", e.target_latency_ns},
            {"target_latency_percentile", e.target_latency_percentile},
            {"max_async_queries", e.max_async_queries},
            {"target_duration_ms", e.target_duration_ms},
            {"min_duration_ms", e.min_duration_ms},
            {"max_duration_ms", e.max_duration_ms},
            {"min_query_count", e.min_query_count},
            {"max_query_count", e.max_query_count},
            {"min_sample_count", e.min_sample_count},
            {"performance_sample_count", e.performance_sample_count},
            {"accuracy_sample_count", e.accuracy_sample_count}}}};
}

nlohmann::json performance_json(const RunResult& run) {
  const PerformanceSummary& s = *run.summary;
  const Verdict& v = *run.verdict;
  const PerformanceResult& r = s.result;
  nlohmann::json j = {{"validity", v.valid ? "VALID" : "INVALID"},
                      {"perf_constraints_met", v.perf_constraints_met},
                      {"min_duration_met", v.min_duration_met},
                      {"min_queries_met", v.min_queries_met},
                      {"early_stopping_met", v.early_stopping_met},
                      {"reasons", v.reasons},
                      {"queries_issued", r.queries_issued},
                      {"samples", s.sample_count},
                      {"output_tokens", s.token_count},
                      {"max_latency_s", r.max_latency},
                      {"final_query_scheduled_s", r.final_query_scheduled_time},
                      {"final_query_issued_s", r.final_query_issued_time},
                      {"final_query_all_samples_done_s", r.final_query_all_samples_done_time},
                      {"latency_ns", stats_json(s.latency)}};
  if (run.settings.scenario == Scenario::offline) {
    j["samples_per_second"] = s.samples_per_second();
    j["tokens_per_second"] = s.tokens_per_second();
  } else {
    j["completed_samples_per_second"] = s.completed_samples_per_second();
    j["completed_tokens_per_second"] = s.completed_tokens_per_second();
    j["scheduled_samples_per_second"] = s.scheduled_samples_per_second();
    j["ttft_ns"] = stats_json(s.first_token);
    j["tpot_ns"] = stats_json(s.tpot);
    j["early_stopping"] = {{"ttft", v.early_stopping_ttft.recommendation},
                           {"tpot", v.early_stopping_tpot.recommendation},
                           {"latency", v.early_stopping.recommendation}};
  }
  return j;
}

// Output tokens per second, samples issued and completed per second, and samples in flight over the run, in about
// 200 bins. A sample's first token counts
// when it arrived and its other tokens evenly between the first token and the completion.
nlohmann::json timeline_json(const RunResult& run) {
  double end = 0;
  for (const SampleRecord& s : run.samples)
    if (s.completed) end = std::max(end, seconds_since(run.start, s.completed_at));
  if (end <= 0 || run.samples.empty()) return nullptr;
  const double bin = std::max(end / 200, 0.01);
  const auto bins = static_cast<size_t>(std::ceil(end / bin)) + 1;
  std::vector<double> tokens(bins, 0), in_flight_delta(bins + 1, 0), issued_count(bins, 0), completed_count(bins, 0);
  auto bin_of = [&](double t) { return std::min(bins - 1, static_cast<size_t>(std::max(0.0, t) / bin)); };
  for (const SampleRecord& s : run.samples) {
    if (!s.completed) continue;
    const double issued = seconds_since(run.start, s.issued_at);
    const double done = seconds_since(run.start, s.completed_at);
    in_flight_delta[bin_of(issued)] += 1;
    in_flight_delta[bin_of(done) + 1] -= 1;
    issued_count[bin_of(issued)] += 1;
    completed_count[bin_of(done)] += 1;
    if (s.token_count < 1) continue;
    const double first = s.first_token_at ? seconds_since(run.start, *s.first_token_at) : done;
    tokens[bin_of(first)] += 1;
    const auto rest = static_cast<double>(s.token_count - 1);
    if (rest <= 0) continue;
    if (done <= first) {
      tokens[bin_of(done)] += rest;
      continue;
    }
    for (size_t b = bin_of(first); b <= bin_of(done); ++b) {
      const double overlap = std::min(done, (b + 1) * bin) - std::max(first, b * bin);
      if (overlap > 0) tokens[b] += rest * overlap / (done - first);
    }
  }
  nlohmann::json t = nlohmann::json::array(), rate = nlohmann::json::array(), flight = nlohmann::json::array(),
                 issued_rate = nlohmann::json::array(), completed_rate = nlohmann::json::array();
  // Issue and completion rates over a window of 11 bins (about 5% of the run): a bin alone holds a few samples.
  auto windowed_rate = [&](const std::vector<double>& counts, size_t b) {
    const size_t lo = b >= 5 ? b - 5 : 0, hi = std::min(bins, b + 6);
    double n = 0;
    for (size_t i = lo; i < hi; ++i) n += counts[i];
    return n / (static_cast<double>(hi - lo) * bin);
  };
  double running = 0;
  for (size_t b = 0; b < bins; ++b) {
    running += in_flight_delta[b];
    t.push_back((b + 0.5) * bin);
    rate.push_back(tokens[b] / bin);
    flight.push_back(running);
    issued_rate.push_back(windowed_rate(issued_count, b));
    completed_rate.push_back(windowed_rate(completed_count, b));
  }
  return {{"bin_seconds", bin},
          {"t", t},
          {"output_tokens_per_second", rate},
          {"in_flight", flight},
          {"issued_per_second", issued_rate},
          {"completed_per_second", completed_rate}};
}

nlohmann::json samples_json(const RunResult& run) {
  nlohmann::json samples = nlohmann::json::array();
  for (const SampleRecord& s : run.samples) {
    nlohmann::json j = {{"seq", s.sequence_id},
                        {"qsl_idx", s.qsl_idx},
                        {"scheduled_s", seconds_since(run.start, s.scheduled)},
                        {"issued_s", seconds_since(run.start, s.issued_at)},
                        {"tokens", s.token_count}};
    if (s.first_token_at) j["first_token_s"] = seconds_since(run.start, *s.first_token_at);
    if (s.completed) j["completed_s"] = seconds_since(run.start, s.completed_at);
    if (!s.finish_reason.empty()) j["finish_reason"] = s.finish_reason;
    if (!s.error.empty()) j["error"] = s.error;
    samples.push_back(std::move(j));
  }
  return samples;
}

std::string s3(double seconds) { return fmt::format("{:.3f} s", seconds); }
std::string ms3(double ns) { return fmt::format("{:.3f} ms", ns / 1e6); }

// One row of the constraints table: a rule the verdict applies, what was measured, the bound, and its status
// ("pass", "fail", or "skipped" where LoadGen does not evaluate it).
nlohmann::json constraint(const std::string& name, const std::string& measured, const std::string& bound,
                          const char* status) {
  return {{"name", name}, {"measured", measured}, {"bound", bound}, {"status", status}};
}
const char* pass_fail(bool met) { return met ? "pass" : "fail"; }

void latency_rows(const RunResult& run, nlohmann::json& rows) {
  const EffectiveSettings& e = run.settings;
  const PerformanceSummary& s = *run.summary;
  const Verdict& v = *run.verdict;
  const std::string pct = fmt::format("p{:g}", e.target_latency_percentile * 100);
  if (e.scenario != Scenario::server) return;
  if (!e.requested.use_token_latencies) {
    rows.push_back(constraint(pct + " latency", ms3(static_cast<double>(s.latency.at_target)),
                              "<= " + ms3(static_cast<double>(e.target_latency_ns)),
                              pass_fail(v.perf_constraints_met)));
    return;
  }
  const auto ttft_bound = static_cast<double>(e.requested.server_ttft_latency);
  const auto tpot_bound = static_cast<double>(e.requested.server_tpot_latency);
  rows.push_back(constraint(pct + " TTFT", s3(static_cast<double>(s.first_token.at_target) / 1e9),
                            "<= " + s3(ttft_bound / 1e9),
                            pass_fail(static_cast<double>(s.first_token.at_target) <= ttft_bound)));
  rows.push_back(constraint(pct + " TPOT", ms3(static_cast<double>(s.tpot.at_target)), "<= " + ms3(tpot_bound),
                            pass_fail(static_cast<double>(s.tpot.at_target) <= tpot_bound)));
}

void early_stopping_rows(const RunResult& run, nlohmann::json& rows) {
  const EffectiveSettings& e = run.settings;
  const Verdict& v = *run.verdict;
  if (e.scenario == Scenario::offline) return;
  const std::string bound = fmt::format("p{:g} at 99% confidence", e.target_latency_percentile * 100);
  if (!e.requested.use_token_latencies) {
    rows.push_back(constraint("early stopping", one_line(v.early_stopping.recommendation), bound,
                              pass_fail(v.early_stopping.met)));
    return;
  }
  rows.push_back(constraint("TPOT early stopping", one_line(v.early_stopping_tpot.recommendation), bound,
                            pass_fail(v.early_stopping_tpot.met)));
  // LoadGen evaluates TTFT's only when TPOT's passes.
  if (v.early_stopping_tpot.met) {
    rows.push_back(constraint("TTFT early stopping", one_line(v.early_stopping_ttft.recommendation), bound,
                              pass_fail(v.early_stopping_ttft.met)));
  } else {
    rows.push_back(constraint("TTFT early stopping", "not evaluated: LoadGen checks it only when TPOT's passes", bound,
                              "skipped"));
  }
}

// Every rule the verdict applies to this run, in the order a submitter reads them.
nlohmann::json constraints_json(const RunResult& run) {
  nlohmann::json rows = nlohmann::json::array();
  const EffectiveSettings& e = run.settings;
  if (run.summary) {
    const PerformanceSummary& s = *run.summary;
    const Verdict& v = *run.verdict;
    latency_rows(run, rows);
    rows.push_back(constraint("min duration", s3(v.duration_s),
                              ">= " + s3(static_cast<double>(e.min_duration_ms) / 1000),
                              pass_fail(v.min_duration_met)));
    rows.push_back(constraint("min queries",
                              fmt::format("{} queries ({} samples)", s.result.queries_issued, s.sample_count),
                              fmt::format(">= {} queries ({} samples)", e.min_query_count, e.min_sample_count),
                              pass_fail(v.min_queries_met)));
    early_stopping_rows(run, rows);
  }
  rows.push_back(constraint("failed samples", failed_samples_text(run.failed_samples, run.samples.size()), "0",
                            pass_fail(run.failed_samples == 0)));
  if (!run.summary)
    rows.push_back(
        constraint("errors in the detail log", std::to_string(run.errors.size()), "0", pass_fail(run.errors.empty())));
  if (run.interrupted)
    rows.push_back(constraint("run completed", "interrupted (Ctrl-C or SIGTERM)", "ran to the end", "fail"));
  if (!run.aborted.empty())
    rows.push_back(constraint("run completed", "stopped: " + run.aborted, "ran to the end", "fail"));
  return rows;
}

}  // namespace

nlohmann::json result_json(const RunResult& run, const nlohmann::json& context) {
  nlohmann::json j;
  j["format"] = "moeserve-bench-result/1";
  j["scenario"] = context.value("scenario", scenario_name(run.settings.scenario));
  j["loadgen_scenario"] = scenario_name(run.settings.scenario);
  j["mode"] = test_mode_name(run.settings.mode);
  j["sut_name"] = run.sut_name;
  j["settings"] = settings_json(run.settings);
  j["validity"] = run_valid(run) ? "VALID" : "INVALID";
  j["reasons"] = invalid_reasons(run);
  j["samples_issued"] = run.samples.size();
  j["samples_failed"] = run.failed_samples;
  j["errors"] = run.errors;
  j["interrupted"] = run.interrupted;
  if (!run.aborted.empty()) j["aborted"] = run.aborted;
  j["wall_seconds"] = run.wall_seconds;
  j["date"] = run.test_datetime;
  j["constraints"] = constraints_json(run);
  j["scheduled_queries"] = run.scheduled_queries;
  j["schedule_note"] = run.schedule_note;
  if (run.summary) j["result"] = performance_json(run);
  if (run.energy_joules) {
    const double tokens = run.summary ? static_cast<double>(run.summary->token_count) : 0;
    j["energy"] = {{"joules", *run.energy_joules},
                   {"joules_per_output_token", tokens > 0 ? *run.energy_joules / tokens : 0.0},
                   {"method", context.value("energy_method", "")}};
  } else {
    j["energy"] = {{"measured", false}, {"reason", context.value("energy_absent_reason", "no NVML")}};
  }
  j["timeline"] = timeline_json(run);
  j["sut_timeline"] = run.sut_timeline;
  j["samples"] = samples_json(run);
  j["reproducibility"] = context;
  return j;
}

std::string result_headline(const nlohmann::json& j) {
  std::string out = fmt::format("{} {} on {}", j.value("scenario", ""), j.value("mode", ""), j.value("sut_name", ""));
  if (j.contains("result")) {
    const nlohmann::json& r = j["result"];
    const bool offline = r.contains("tokens_per_second");
    out += fmt::format(": {} | {:.2f} {} | {} samples, {} output tokens", r.value("validity", ""),
                       r.value(offline ? "tokens_per_second" : "completed_tokens_per_second", 0.0),
                       offline ? "tokens/s" : "completed tokens/s", r.value("samples", 0), r.value("output_tokens", 0));
    if (r.contains("ttft_ns"))
      out += fmt::format(" | p99 TTFT {:.1f} ms, p99 TPOT {:.2f} ms", r["ttft_ns"]["p99"].get<double>() / 1e6,
                         r["tpot_ns"]["p99"].get<double>() / 1e6);
  } else {
    out += fmt::format(": {} | {} samples", j.value("validity", ""), j.value("samples_issued", 0));
  }
  for (const auto& reason : j["reasons"]) out += "\n  INVALID: " + reason.get<std::string>();
  if (j.contains("energy") && j["energy"].contains("joules"))
    out += fmt::format("\n  energy: {:.1f} J, {:.4f} J per output token", j["energy"]["joules"].get<double>(),
                       j["energy"]["joules_per_output_token"].get<double>());
  for (const auto& e : j["errors"]) out += "\n  error: " + e.get<std::string>();
  return out;
}

std::string write_reports(const std::string& dir, const nlohmann::json& result) {
  namespace fs = std::filesystem;
  write_text_file((fs::path(dir) / "moeserve_result.json").string(), result.dump(1) + "\n");
  const std::string html = (fs::path(dir) / "moeserve_report.html").string();
  write_text_file(html, report_html(result));
  return html;
}

}  // namespace moeserve::bench
