// moeserve_report.html from moeserve_result.json: everything drawn comes from the JSON, so a result file can be
// re-rendered (and compared) without the run.
#include <fmt/format.h>

#include <algorithm>

#include "bench/report.h"
#include "bench/svg_plot.h"

namespace moeserve::bench {
namespace {

constexpr const char* kBlue = "#4e79a7";
constexpr const char* kRed = "#c0392b";
constexpr const char* kGreen = "#27ae60";
constexpr const char* kOrange = "#f28e2b";

std::vector<double> doubles(const nlohmann::json& array, double scale = 1) {
  std::vector<double> out;
  if (array.is_array())
    for (const auto& v : array) out.push_back(v.get<double>() * scale);
  return out;
}

std::string row(const std::string& name, const std::string& value) {
  return fmt::format("<tr><th>{}</th><td>{}</td></tr>", html_escape(name), html_escape(value));
}

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null_value;
  return j.is_object() && j.contains(key) ? j[key] : null_value;
}

// What the run measured: the in-process model's directory or the endpoint, and the checkpoint's hash.
std::string sut_line(const nlohmann::json& sut) {
  auto text = [&](const char* key) {
    const nlohmann::json& v = field(sut, key);
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  if (field(sut, "kind") == "http") return fmt::format("endpoint {} (model {})", text("endpoint"), text("model"));
  const nlohmann::json& checkpoint = field(sut, "checkpoint");
  std::string model = checkpoint.contains("directory")   ? checkpoint["directory"].get<std::string>()
                      : checkpoint.contains("synthetic") ? "synthetic " + checkpoint["synthetic"].get<std::string>()
                                                         : "in-process engine";
  std::string hash = checkpoint.contains("sha256") ? checkpoint["sha256"].get<std::string>() : "no checkpoint file";
  return fmt::format("model {} on the {} runner | checkpoint sha256 {}", model, text("runner"), hash);
}

std::string title(const nlohmann::json& j) {
  const nlohmann::json& repro = j["reproducibility"];
  return fmt::format("<h1>{} · {} · {}</h1><p class=\"sub\">{} | {}</p>",
                     html_escape(repro.value("benchmark", "moeserve bench")), html_escape(j.value("scenario", "")),
                     html_escape(j.value("mode", "")), html_escape(sut_line(field(repro, "system_under_test"))),
                     html_escape(j.value("date", "")));
}

std::string banner(const nlohmann::json& j) {
  const bool valid = j.value("validity", "") == "VALID";
  std::string verdict = j.value("validity", "");
  if (j.value("interrupted", false)) verdict += " (interrupted)";
  std::string headline;
  if (j.contains("result")) {
    const nlohmann::json& r = j["result"];
    const bool offline = r.contains("tokens_per_second");
    headline = fmt::format("{:.1f} {}", r.value(offline ? "tokens_per_second" : "completed_tokens_per_second", 0.0),
                           offline ? "tokens/s" : "completed tokens/s");
    if (j.contains("find_peak") && j["find_peak"].contains("peak_qps"))
      headline += fmt::format(" at {:g} qps (highest VALID found)", j["find_peak"]["peak_qps"].get<double>());
  }
  std::string s = fmt::format("<div id=\"verdict\" class=\"banner {}\"><span class=\"word\">{}</span> {}",
                              valid ? "valid" : "invalid", html_escape(verdict), html_escape(headline));
  if (!j["reasons"].empty()) {
    s += "<ul>";
    for (const auto& reason : j["reasons"]) s += "<li>" + html_escape(reason.get<std::string>()) + "</li>";
    s += "</ul>";
  }
  return s + "</div>";
}

std::string constraints_table(const nlohmann::json& j) {
  std::string s =
      "<h2>Constraints</h2><table id=\"constraints\"><tr><th></th><th>rule</th><th>measured</th>"
      "<th>bound</th></tr>";
  for (const auto& c : j["constraints"]) {
    const std::string status = c["status"];
    const char* mark = status == "pass" ? "✓" : status == "fail" ? "✗" : "–";
    s += fmt::format("<tr class=\"{}\"><td class=\"mark\">{}</td><th>{}</th><td>{}</td><td>{}</td></tr>", status, mark,
                     html_escape(c["name"]), html_escape(c["measured"]), html_escape(c["bound"]));
  }
  return s + "</table>";
}

std::string metrics_table(const nlohmann::json& j) {
  std::string s = "<h2>Result</h2><table>";
  s += row("System under test", j.value("sut_name", ""));
  s += row("Samples failed", fmt::format("{} of {}", j.value("samples_failed", 0), j.value("samples_issued", 0)));
  if (j.value("scheduled_queries", 0) > 0)
    s += row("Schedule", fmt::format("{} queries: {}", j.value("scheduled_queries", 0), j.value("schedule_note", "")));
  if (j.contains("result")) {
    const nlohmann::json& r = j["result"];
    for (const char* key : {"tokens_per_second", "samples_per_second", "completed_tokens_per_second",
                            "completed_samples_per_second", "scheduled_samples_per_second"})
      if (r.contains(key)) s += row(key, fmt::format("{:.3f}", r[key].get<double>()));
    s += row("samples / output tokens", fmt::format("{} / {}", r.value("samples", 0), r.value("output_tokens", 0)));
  }
  const nlohmann::json& sut = field(j["reproducibility"], "system_under_test");
  if (sut.contains("speculative_decoding")) {
    const nlohmann::json& spec = sut["speculative_decoding"];
    std::string rates;
    for (const auto& rate : spec["acceptance_rate_per_position"])
      rates += fmt::format("{}{:.3f}", rates.empty() ? "" : ", ", rate.get<double>());
    s += row("Speculative decoding",
             fmt::format("acceptance length {:.3f} over {} verify steps; by position: {}",
                         spec["mean_acceptance_length"].get<double>(), spec["drafts"].get<uint64_t>(), rates));
  }
  if (j["energy"].contains("joules"))
    s += row("Energy",
             fmt::format("{:.1f} J ({:.4f} J per output token; {})", j["energy"]["joules"].get<double>(),
                         j["energy"]["joules_per_output_token"].get<double>(), j["energy"].value("method", "")));
  s += "</table>";
  if (!j.contains("result")) return s;
  // Percentiles in ms (the JSON keeps LoadGen's ns).
  const nlohmann::json& r = j["result"];
  s += "<table id=\"percentiles\"><tr><th>ms</th>";
  for (const char* p : {"p50", "p90", "p95", "p97", "p99", "p99.9", "max"}) s += fmt::format("<th>{}</th>", p);
  s += "</tr>";
  for (auto [key, name] : {std::pair{"latency_ns", "Latency"}, {"ttft_ns", "TTFT"}, {"tpot_ns", "TPOT"}}) {
    if (!r.contains(key)) continue;
    s += fmt::format("<tr><th>{}</th>", name);
    for (const char* p : {"p50", "p90", "p95", "p97", "p99", "p99.9", "max"})
      s += fmt::format("<td>{:.2f}</td>", r[key][p].get<double>() / 1e6);
    s += "</tr>";
  }
  return s + "</table>";
}

// Per completed sample: issue time, output length, latency, TTFT and TPOT (LoadGen's definitions), in seconds
// and ms; failed samples apart.
struct SamplePoints {
  std::vector<double> issued_s, tokens, latency_s, ttft_s, tpot_ms;
  std::vector<double> failed_issued_s, failed_latency_s;
};

SamplePoints sample_points(const nlohmann::json& samples) {
  SamplePoints p;
  for (const auto& s : samples) {
    if (!s.contains("completed_s")) continue;
    const double scheduled = s["scheduled_s"].get<double>();
    const double latency = s["completed_s"].get<double>() - scheduled;
    if (s.contains("error")) {
      p.failed_issued_s.push_back(s["issued_s"].get<double>());
      p.failed_latency_s.push_back(latency);
      continue;
    }
    const auto n = s["tokens"].get<int64_t>();
    const double ttft = s.contains("first_token_s") ? s["first_token_s"].get<double>() - scheduled : latency;
    p.issued_s.push_back(s["issued_s"].get<double>());
    p.tokens.push_back(static_cast<double>(n));
    p.latency_s.push_back(latency);
    p.ttft_s.push_back(ttft);
    p.tpot_ms.push_back(n > 1 ? (latency - ttft) / static_cast<double>(n - 1) * 1e3 : 0.0);
  }
  return p;
}

struct Bounds {
  bool server = false;  // TTFT and TPOT are bounded (Server and Interactive with token latencies)
  double ttft_s = 0, tpot_ms = 0;
  std::optional<double> p99_ttft_s, p99_tpot_ms;
};

Bounds bounds(const nlohmann::json& j) {
  Bounds b;
  const nlohmann::json& requested = j["settings"]["requested"];
  b.server = j.value("loadgen_scenario", "") == "Server" && requested.value("use_token_latencies", false);
  b.ttft_s = requested.value("server_ttft_latency_ns", 0.0) / 1e9;
  b.tpot_ms = requested.value("server_tpot_latency_ns", 0.0) / 1e6;
  if (j.contains("result") && j["result"].contains("ttft_ns")) {
    b.p99_ttft_s = j["result"]["ttft_ns"]["p99"].get<double>() / 1e9;
    b.p99_tpot_ms = j["result"]["tpot_ns"]["p99"].get<double>() / 1e6;
  }
  return b;
}

std::vector<Marker> limit_and_p99(double limit, std::optional<double> p99) {
  std::vector<Marker> m = {{limit, "limit", kRed}};
  if (p99) m.push_back({*p99, "p99", kGreen});
  return m;
}

std::string dots(const std::vector<double>& x, const std::vector<double>& y, const ChartSpec& spec,
                 const std::vector<double>& failed_x = {}, const std::vector<double>& failed_y = {}) {
  std::vector<Series> series = {{x, y, "completed", kBlue, true}};
  if (!failed_x.empty()) series.push_back({failed_x, failed_y, "failed", kRed, true});
  return svg_chart(series, spec);
}

std::string distributions_and_samples(const nlohmann::json& j) {
  const SamplePoints p = sample_points(j["samples"]);
  const Bounds b = bounds(j);
  std::string s = "<h2>Distributions</h2>";
  if (b.server) {
    s += svg_histogram(
        p.ttft_s, {"ttft-histogram", "Time to first token", "s", "samples", limit_and_p99(b.ttft_s, b.p99_ttft_s), {}});
    s += svg_histogram(
        p.tpot_ms,
        {"tpot-histogram", "Time per output token", "ms", "samples", limit_and_p99(b.tpot_ms, b.p99_tpot_ms), {}});
    s += "<h2>Per sample</h2><p>A queue building shows as TTFT rising with issue time.</p>";
    s += dots(p.issued_s, p.ttft_s,
              {"ttft-vs-issue",
               "TTFT against issue time",
               "issued at (s)",
               "TTFT (s)",
               {},
               {{b.ttft_s, "TTFT limit", kRed}}});
    s += dots(p.issued_s, p.tpot_ms,
              {"tpot-vs-issue",
               "TPOT against issue time",
               "issued at (s)",
               "TPOT (ms)",
               {},
               {{b.tpot_ms, "TPOT limit", kRed}}});
    s += dots(p.tokens, p.ttft_s,
              {"ttft-vs-output",
               "TTFT against output length",
               "output tokens",
               "TTFT (s)",
               {},
               {{b.ttft_s, "TTFT limit", kRed}}});
    s += dots(p.tokens, p.tpot_ms,
              {"tpot-vs-output",
               "TPOT against output length",
               "output tokens",
               "TPOT (ms)",
               {},
               {{b.tpot_ms, "TPOT limit", kRed}}});
    return s;
  }
  // Offline and SingleStream have no latency bound: no limit lines.
  std::vector<Marker> p99;
  if (j.contains("result")) p99.push_back({j["result"]["latency_ns"]["p99"].get<double>() / 1e9, "p99", kGreen});
  s += svg_histogram(p.latency_s, {"latency-histogram", "Sample latency", "s", "samples", p99, {}});
  s += "<h2>Per sample</h2>";
  s += dots(p.tokens, p.latency_s,
            {"latency-vs-output", "Latency against output length", "output tokens", "latency (s)", {}, {}}, {}, {});
  s += dots(p.issued_s, p.latency_s,
            {"latency-vs-issue", "Latency against issue time", "issued at (s)", "latency (s)", {}, {}},
            p.failed_issued_s, p.failed_latency_s);
  return s;
}

std::string over_time(const nlohmann::json& j) {
  if (j["timeline"].is_null()) return "";
  const nlohmann::json& t = j["timeline"];
  const std::vector<double> x = doubles(t["t"]);
  std::string s = "<h2>Over time</h2>";
  s += svg_chart({{x, doubles(t["issued_per_second"]), "issued", kBlue, false},
                  {x, doubles(t["completed_per_second"]), "completed", kOrange, false}},
                 {"issued-completed", "Samples issued and completed per second", "seconds", "samples/s", {}, {}});
  s += svg_chart({{x, doubles(t["output_tokens_per_second"]), "", kRed, false}},
                 {"output-tokens", "Output tokens per second", "seconds", "tokens/s", {}, {}});
  s += svg_chart({{x, doubles(t["in_flight"]), "", kRed, false}},
                 {"in-flight", "Samples in flight", "seconds", "samples", {}, {}});
  return s;
}

std::string engine_over_time(const nlohmann::json& j) {
  const nlohmann::json& e = j.value("sut_timeline", nlohmann::json());
  if (e.is_null()) return "";
  const std::vector<double> x = doubles(e["t"]);
  std::string s = fmt::format("<h2>Engine over time</h2><p>Sampled from the engine every {} ms or more.</p>",
                              e.value("period_ms", 0));
  s += svg_chart({{x, doubles(e["running"]), "running (batch)", kBlue, false},
                  {x, doubles(e["waiting"]), "waiting", kOrange, false}},
                 {"engine-batch", "Batch size and waiting requests", "seconds", "requests", {}, {}});
  s += svg_chart({{x, doubles(e["kv_usage"], 100), "", kBlue, false}},
                 {"engine-kv", "KV cache in use", "seconds", "% of blocks", {}, {{100, "full", kRed}}});
  s += svg_chart({{x, doubles(e["preemptions"]), "", kRed, false}},
                 {"engine-preemptions", "Preemptions per interval", "seconds", "preemptions", {}, {}});
  s += svg_chart({{x, doubles(e["prefix_hit_rate"], 100), "", kGreen, false}},
                 {"engine-prefix", "Prefix-cache hits (share of prompt tokens looked up)", "seconds", "%", {}, {}});
  s += svg_chart({{x, doubles(e["mean_step_ms"]), "", kBlue, false}},
                 {"engine-step-time", "Mean step time", "seconds", "ms", {}, {}});
  return s;
}

std::string find_peak_section(const nlohmann::json& j) {
  if (!j.contains("find_peak")) return "";
  const nlohmann::json& f = j["find_peak"];
  std::string s = fmt::format(
      "<h2>Find peak</h2><p>{}</p><table id=\"find-peak-probes\"><tr><th>#</th>"
      "<th>target qps</th><th>verdict</th><th>p99 TTFT (s)</th><th>p99 TPOT (ms)</th>"
      "<th>tokens/s</th><th>run (s)</th><th>why</th></tr>",
      html_escape(f.value("method", "")));
  std::vector<double> ok_q, ok_ttft, ok_tpot, bad_q, bad_ttft, bad_tpot;
  int n = 0;
  for (const auto& p : f["probes"]) {
    const bool valid = p.value("valid", false);
    const double q = p["target_qps"], ttft = p["p99_ttft_s"], tpot = p["p99_tpot_ms"];
    (valid ? ok_q : bad_q).push_back(q);
    (valid ? ok_ttft : bad_ttft).push_back(ttft);
    (valid ? ok_tpot : bad_tpot).push_back(tpot);
    std::string why;
    for (const auto& reason : p["reasons"]) why += (why.empty() ? "" : "; ") + reason.get<std::string>();
    s += fmt::format(
        "<tr class=\"{}\"><td>{}</td><td>{:g}</td><td>{}</td><td>{:.3f}</td><td>{:.2f}</td><td>{:.1f}"
        "</td><td>{:.1f}</td><td>{}</td></tr>",
        valid ? "pass" : "fail", ++n, q, p.value("kind", "probe") + (valid ? " VALID" : " INVALID"), ttft, tpot,
        p.value("tokens_per_second", 0.0), p.value("seconds", 0.0), html_escape(why));
  }
  s += "</table>";
  const Bounds b = bounds(j);
  std::vector<Marker> peak;
  if (f.contains("peak_qps")) peak.push_back({f["peak_qps"].get<double>(), "peak", kGreen});
  s += svg_chart({{ok_q, ok_ttft, "VALID", kGreen, true}, {bad_q, bad_ttft, "INVALID", kRed, true}},
                 {"find-peak-ttft",
                  "Probes: p99 TTFT against target qps",
                  "target qps",
                  "p99 TTFT (s)",
                  peak,
                  {{b.ttft_s, "TTFT limit", kRed}}});
  s += svg_chart({{ok_q, ok_tpot, "VALID", kGreen, true}, {bad_q, bad_tpot, "INVALID", kRed, true}},
                 {"find-peak-tpot",
                  "Probes: p99 TPOT against target qps",
                  "target qps",
                  "p99 TPOT (ms)",
                  peak,
                  {{b.tpot_ms, "TPOT limit", kRed}}});
  return s;
}

// A value as a person reads it: *_ns settings in ms.
std::pair<std::string, std::string> setting_display(const std::string& key, const nlohmann::json& value) {
  const std::string ns = "_ns";
  if (key.size() > ns.size() && key.ends_with(ns) && value.is_number())
    return {key.substr(0, key.size() - ns.size()) + " (ms)", fmt::format("{:g}", value.get<double>() / 1e6)};
  if (value.is_number_float()) return {key, fmt::format("{:g}", value.get<double>())};
  return {key, value.is_string() ? value.get<std::string>() : value.dump()};
}

std::string settings_tables(const nlohmann::json& j) {
  const nlohmann::json& sources = field(j["reproducibility"], "setting_sources");
  std::string s =
      "<h2>Settings</h2><p>Requested settings (LoadGen's TestSettings) and where each value came "
      "from; <b>marked</b> rows override mlperf.conf.</p><table id=\"settings\"><tr><th>setting</th>"
      "<th>value</th><th>from</th></tr>";
  for (const auto& [key, value] : j["settings"]["requested"].items()) {
    const std::string source = sources.is_object() ? sources.value(key, "default") : "default";
    const bool override = source != "default" && source != "mlperf.conf";
    const auto [name, text] = setting_display(key, value);
    s += fmt::format("<tr{}><th>{}</th><td>{}</td><td>{}</td></tr>", override ? " class=\"override\"" : "",
                     html_escape(name), html_escape(text), html_escape(source) + (override ? " ●" : ""));
  }
  s += "</table><h3>Effective (as LoadGen derives them)</h3><table>";
  for (const auto& [key, value] : j["settings"]["effective"].items()) {
    const auto [name, text] = setting_display(key, value);
    s += row(name, text);
  }
  s += "</table>";
  const nlohmann::json& sut = field(j["reproducibility"], "system_under_test");
  for (const char* part : {"engine", "runner_settings"}) {
    if (!sut.contains(part) || !sut[part].is_object()) continue;
    s += fmt::format("<h3>{}</h3><table>", part == std::string("engine") ? "Engine" : "Runner");
    for (const auto& [key, value] : sut[part].items())
      s += row(key, value.is_string() ? value.get<std::string>() : value.dump());
    s += "</table>";
  }
  return s;
}

}  // namespace

std::string report_html(const nlohmann::json& j) {
  std::string body = title(j) + banner(j) + constraints_table(j) + metrics_table(j);
  if (!j["errors"].empty()) {
    body += "<h2>Errors</h2><ul>";
    for (const auto& e : j["errors"]) body += "<li>" + html_escape(e.get<std::string>()) + "</li>";
    body += "</ul>";
  }
  body += find_peak_section(j) + distributions_and_samples(j) + over_time(j) + engine_over_time(j) + settings_tables(j);
  body += "<h2>Reproducibility</h2><pre>" + html_escape(j["reproducibility"].dump(2)) + "</pre>";
  return "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>moeserve bench report</title><style>"
         "body{font-family:sans-serif;margin:24px;max-width:980px}table{border-collapse:collapse;margin:8px 0}"
         "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f4f4f4}"
         ".sub{color:#555}.banner{padding:12px 16px;border-radius:6px;color:#fff;font-size:16px}"
         ".banner .word{font-size:26px;font-weight:bold;margin-right:12px}.banner ul{margin:6px 0 0 0}"
         ".valid{background:#1e8449}.invalid{background:#b03a2e}tr.pass .mark{color:#1e8449;font-weight:bold}"
         "tr.fail .mark{color:#b03a2e;font-weight:bold}tr.fail{background:#fdecea}tr.override{background:#fff4d6}"
         "pre{background:#f8f8f8;padding:8px;overflow:auto;font-size:12px}svg{display:block;margin:8px 0}"
         "</style></head><body>" +
         body + "</body></html>\n";
}

}  // namespace moeserve::bench
