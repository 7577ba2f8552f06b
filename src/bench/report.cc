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

nlohmann::json settings_json(const EffectiveSettings& e) {
  const TestSettings& r = e.requested;
  return {{"requested",
           {{"scenario", scenario_name(r.scenario)},
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
            {"server_tpot_latency_ns", r.server_tpot_latency}}},
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

// Output tokens per second and samples in flight over the run, in about 200 bins. A sample's first token counts
// when it arrived and its other tokens evenly between the first token and the completion.
nlohmann::json timeline_json(const RunResult& run) {
  double end = 0;
  for (const SampleRecord& s : run.samples)
    if (s.completed) end = std::max(end, seconds_since(run.start, s.completed_at));
  if (end <= 0 || run.samples.empty()) return nullptr;
  const double bin = std::max(end / 200, 0.01);
  const auto bins = static_cast<size_t>(std::ceil(end / bin)) + 1;
  std::vector<double> tokens(bins, 0), in_flight_delta(bins + 1, 0);
  auto bin_of = [&](double t) { return std::min(bins - 1, static_cast<size_t>(std::max(0.0, t) / bin)); };
  for (const SampleRecord& s : run.samples) {
    if (!s.completed) continue;
    const double issued = seconds_since(run.start, s.issued_at);
    const double done = seconds_since(run.start, s.completed_at);
    in_flight_delta[bin_of(issued)] += 1;
    in_flight_delta[bin_of(done) + 1] -= 1;
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
  nlohmann::json t = nlohmann::json::array(), rate = nlohmann::json::array(), flight = nlohmann::json::array();
  double running = 0;
  for (size_t b = 0; b < bins; ++b) {
    running += in_flight_delta[b];
    t.push_back((b + 0.5) * bin);
    rate.push_back(tokens[b] / bin);
    flight.push_back(running);
  }
  return {{"bin_seconds", bin}, {"t", t}, {"output_tokens_per_second", rate}, {"in_flight", flight}};
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

std::vector<double> doubles(const nlohmann::json& array, double scale = 1) {
  std::vector<double> out;
  if (array.is_array())
    for (const auto& v : array) out.push_back(v.get<double>() * scale);
  return out;
}

std::string row(const std::string& name, const std::string& value) {
  return fmt::format("<tr><th>{}</th><td>{}</td></tr>", html_escape(name), html_escape(value));
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

std::string report_html(const nlohmann::json& j) {
  std::string body;
  body += fmt::format("<h1>moeserve bench: {} {}</h1>", html_escape(j.value("scenario", "")),
                      html_escape(j.value("mode", "")));
  body += "<table>";
  body += row("System under test", j.value("sut_name", ""));
  body += row("Result", j.value("validity", ""));
  body += row("Samples failed", fmt::format("{} of {}", j.value("samples_failed", 0), j.value("samples_issued", 0)));
  if (j.contains("result")) {
    const nlohmann::json& r = j["result"];
    for (const char* key : {"tokens_per_second", "samples_per_second", "completed_tokens_per_second",
                            "completed_samples_per_second", "scheduled_samples_per_second"})
      if (r.contains(key)) body += row(key, fmt::format("{:.3f}", r[key].get<double>()));
    body += row("samples / output tokens", fmt::format("{} / {}", r.value("samples", 0), r.value("output_tokens", 0)));
    const nlohmann::json sut = j["reproducibility"].value("system_under_test", nlohmann::json::object());
    if (sut.contains("speculative_decoding")) {
      const nlohmann::json& spec = sut["speculative_decoding"];
      std::string rates;
      for (const auto& rate : spec["acceptance_rate_per_position"])
        rates += fmt::format("{}{:.3f}", rates.empty() ? "" : ", ", rate.get<double>());
      body += row("Speculative decoding",
                  fmt::format("acceptance length {:.3f} over {} verify steps; acceptance rate by position: {}",
                              spec["mean_acceptance_length"].get<double>(), spec["drafts"].get<uint64_t>(), rates));
    }
    for (const char* key : {"latency_ns", "ttft_ns", "tpot_ns"}) {
      if (!r.contains(key)) continue;
      const nlohmann::json& s = r[key];
      body += row(
          key, fmt::format("p50 {:.2f} ms, p90 {:.2f}, p95 {:.2f}, p97 {:.2f}, p99 {:.2f}, p99.9 {:.2f}",
                           s["p50"].get<double>() / 1e6, s["p90"].get<double>() / 1e6, s["p95"].get<double>() / 1e6,
                           s["p97"].get<double>() / 1e6, s["p99"].get<double>() / 1e6, s["p99.9"].get<double>() / 1e6));
    }
  }
  if (j["energy"].contains("joules"))
    body += row("Energy",
                fmt::format("{:.1f} J ({:.4f} J per output token; {})", j["energy"]["joules"].get<double>(),
                            j["energy"]["joules_per_output_token"].get<double>(), j["energy"].value("method", "")));
  body += "</table>";
  if (!j["reasons"].empty()) {
    body += "<h2>Why INVALID</h2><ul>";
    for (const auto& reason : j["reasons"]) body += "<li>" + html_escape(reason.get<std::string>()) + "</li>";
    body += "</ul>";
  }
  if (!j["errors"].empty()) {
    body += "<h2>Errors</h2><ul>";
    for (const auto& e : j["errors"]) body += "<li>" + html_escape(e.get<std::string>()) + "</li>";
    body += "</ul>";
  }
  // Per-sample TTFT and TPOT (ms) from the sample records.
  std::vector<double> ttft, tpot;
  for (const auto& s : j["samples"]) {
    if (!s.contains("first_token_s") || !s.contains("completed_s")) continue;
    const double first = s["first_token_s"].get<double>() - s["scheduled_s"].get<double>();
    const double latency = s["completed_s"].get<double>() - s["scheduled_s"].get<double>();
    ttft.push_back(first * 1e3);
    const auto n = s["tokens"].get<int64_t>();
    if (n > 1) tpot.push_back((latency - first) / static_cast<double>(n - 1) * 1e3);
  }
  const nlohmann::json& requested = j["settings"]["requested"];
  const nlohmann::json percentiles = j.contains("result") ? j["result"] : nlohmann::json::object();
  auto markers = [&](const char* limit_key, const char* stats_key) {
    std::vector<Marker> m = {{requested[limit_key].get<double>() / 1e6, "limit", "#c0392b"}};
    if (percentiles.contains(stats_key))
      m.push_back({percentiles[stats_key]["p99"].get<double>() / 1e6, "p99", "#27ae60"});
    return m;
  };
  body += "<h2>Distributions</h2>";
  body += svg_histogram(ttft, "Time to first token", "ms", markers("server_ttft_latency_ns", "ttft_ns"));
  body += svg_histogram(tpot, "Time per output token", "ms", markers("server_tpot_latency_ns", "tpot_ns"));
  if (!j["timeline"].is_null()) {
    const nlohmann::json& t = j["timeline"];
    body += "<h2>Over time</h2>";
    body += svg_line_chart(doubles(t["t"]), doubles(t["output_tokens_per_second"]), "Output tokens per second",
                           "seconds", "tokens/s");
    body += svg_line_chart(doubles(t["t"]), doubles(t["in_flight"]), "Samples in flight", "seconds", "samples");
  }
  body += "<h2>Settings after overrides</h2><pre>" + html_escape(j["settings"].dump(2)) + "</pre>";
  body += "<h2>Reproducibility</h2><pre>" + html_escape(j["reproducibility"].dump(2)) + "</pre>";
  return "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>moeserve bench report</title><style>"
         "body{font-family:sans-serif;margin:24px;max-width:980px}table{border-collapse:collapse}"
         "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f4f4f4}"
         "pre{background:#f8f8f8;padding:8px;overflow:auto;font-size:12px}svg{display:block;margin:8px 0}"
         "</style></head><body>" +
         body + "</body></html>\n";
}

std::string write_reports(const std::string& dir, const nlohmann::json& result) {
  namespace fs = std::filesystem;
  write_text_file((fs::path(dir) / "moeserve_result.json").string(), result.dump(1) + "\n");
  const std::string html = (fs::path(dir) / "moeserve_report.html").string();
  write_text_file(html, report_html(result));
  return html;
}

}  // namespace moeserve::bench
