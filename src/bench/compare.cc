#include "bench/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "bench/svg_plot.h"

namespace moeserve::bench {
namespace {

// The value at a path of keys ("result", "ttft_ns", "p99"), when every key is there and it is a number.
std::optional<double> number_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return std::nullopt;
    at = &(*at)[key];
  }
  if (!at->is_number()) return std::nullopt;
  return at->get<double>();
}

std::optional<double> scaled(std::optional<double> v, double scale) {
  if (v) *v *= scale;
  return v;
}

// The throughput a run is judged by: tokens/s in Offline, completed tokens/s otherwise.
std::optional<double> tokens_per_second(const nlohmann::json& j) {
  if (auto v = number_at(j, {"result", "tokens_per_second"})) return v;
  return number_at(j, {"result", "completed_tokens_per_second"});
}
std::optional<double> samples_per_second(const nlohmann::json& j) {
  if (auto v = number_at(j, {"result", "samples_per_second"})) return v;
  return number_at(j, {"result", "completed_samples_per_second"});
}

std::string text_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return "";
    at = &(*at)[key];
  }
  return at->is_string() ? at->get<std::string>() : at->dump();
}

std::string format_value(std::optional<double> v) {
  if (!v) return "-";
  if (std::abs(*v) >= 100 || *v == std::floor(*v)) return fmt::format("{:.0f}", *v);
  return fmt::format("{:.3g}", *v);
}

std::string ratio_text(const ComparedMetric& m, size_t run) {
  const std::optional<double> r = m.ratio(run);
  return r ? fmt::format("x{:.2f}", *r) : "";
}

// Whether a ratio is an improvement on the first run (by the metric's direction), for the page's colours.
const char* ratio_class(const ComparedMetric& m, size_t run) {
  const std::optional<double> r = m.ratio(run);
  if (!r || *r == 1) return "";
  return (*r > 1) == m.higher_is_better ? "better" : "worse";
}

}  // namespace

std::optional<double> ComparedMetric::ratio(size_t run) const {
  if (run >= values.size() || !values[run] || !values[0] || *values[0] == 0) return std::nullopt;
  return *values[run] / *values[0];
}

std::vector<ComparedMetric> compared_metrics(const std::vector<ComparedRun>& runs) {
  struct Spec {
    const char* name;
    const char* unit;
    bool higher_is_better;
    std::function<std::optional<double>(const nlohmann::json&)> get;
  };
  const std::vector<Spec> specs = {
      {"throughput", "output tokens/s", true, tokens_per_second},
      {"sample rate", "samples/s", true, samples_per_second},
      {"p50 TTFT", "ms", false,
       [](const auto& j) {
         return scaled(number_at(j, {"result", "ttft_ns", "p50"}), 1e-6);
       }},
      {"p99 TTFT", "ms", false,
       [](const auto& j) {
         return scaled(number_at(j, {"result", "ttft_ns", "p99"}), 1e-6);
       }},
      {"p50 TPOT", "ms", false,
       [](const auto& j) {
         return scaled(number_at(j, {"result", "tpot_ns", "p50"}), 1e-6);
       }},
      {"p99 TPOT", "ms", false,
       [](const auto& j) {
         return scaled(number_at(j, {"result", "tpot_ns", "p99"}), 1e-6);
       }},
      {"p50 latency", "ms", false,
       [](const auto& j) {
         return scaled(number_at(j, {"result", "latency_ns", "p50"}), 1e-6);
       }},
      {"p99 latency", "ms", false,
       [](const auto& j) {
         return scaled(number_at(j, {"result", "latency_ns", "p99"}), 1e-6);
       }},
      {"samples", "", true,
       [](const auto& j) {
         return number_at(j, {"result", "samples"});
       }},
      {"output tokens", "", true,
       [](const auto& j) {
         return number_at(j, {"result", "output_tokens"});
       }},
      {"failed samples", "", false, [](const auto& j) { return number_at(j, {"samples_failed"}); }},
      {"wall time", "s", false, [](const auto& j) { return number_at(j, {"wall_seconds"}); }},
      {"energy per output token", "J", false,
       [](const auto& j) {
         return number_at(j, {"energy", "joules_per_output_token"});
       }},
  };
  std::vector<ComparedMetric> metrics;
  for (const Spec& s : specs) {
    ComparedMetric m{s.name, s.unit, s.higher_is_better, {}};
    bool any = false;
    for (const ComparedRun& run : runs) {
      m.values.push_back(s.get(run.result));
      any |= m.values.back().has_value();
    }
    if (any) metrics.push_back(std::move(m));
  }
  return metrics;
}

std::vector<std::string> differences(const std::vector<ComparedRun>& runs) {
  const std::vector<std::pair<const char*, std::vector<const char*>>> keys = {
      {"scenario", {"scenario"}},
      {"mode", {"mode"}},
      {"dataset", {"reproducibility", "dataset", "sha256"}},
      {"target qps", {"settings", "effective", "target_qps"}},
      {"TTFT bound", {"settings", "requested", "server_ttft_latency_ns"}},
      {"TPOT bound", {"settings", "requested", "server_tpot_latency_ns"}},
      {"min duration", {"settings", "effective", "min_duration_ms"}},
      {"max output tokens", {"reproducibility", "max_output_tokens"}},
  };
  std::vector<std::string> out;
  for (const auto& [name, path] : keys) {
    std::vector<std::string> values;
    for (const ComparedRun& run : runs) {
      const nlohmann::json* at = &run.result;
      for (const char* key : path) at = at && at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
      values.push_back(at ? at->dump() : "");
    }
    if (std::adjacent_find(values.begin(), values.end(), std::not_equal_to<>()) != values.end()) out.push_back(name);
  }
  return out;
}

std::string compare_text(const std::vector<ComparedRun>& runs) {
  std::string out = fmt::format("{:<26}", "");
  for (size_t i = 0; i < runs.size(); ++i) out += fmt::format(" {:>22}", fmt::format("[{}]", i + 1));
  out += "\n";
  auto line = [&](const std::string& name, const std::vector<std::string>& cells) {
    out += fmt::format("{:<26}", name);
    for (const std::string& c : cells) out += fmt::format(" {:>22}", c);
    out += "\n";
  };
  std::vector<std::string> verdicts, suts;
  for (const ComparedRun& run : runs) {
    verdicts.push_back(text_at(run.result, {"validity"}));
    suts.push_back(text_at(run.result, {"sut_name"}));
  }
  line("verdict", verdicts);
  line("system under test", suts);
  for (const ComparedMetric& m : compared_metrics(runs)) {
    std::vector<std::string> cells;
    for (size_t i = 0; i < runs.size(); ++i) {
      std::string cell = format_value(m.values[i]);
      if (i > 0 && m.ratio(i)) cell += " (" + ratio_text(m, i) + ")";
      cells.push_back(cell);
    }
    line(m.unit.empty() ? m.name : m.name + " (" + m.unit + ")", cells);
  }
  for (size_t i = 0; i < runs.size(); ++i) out += fmt::format("[{}] {}\n", i + 1, runs[i].label);
  out += "ratios: each run's value over run [1]'s\n";
  const std::vector<std::string> diff = differences(runs);
  if (!diff.empty()) {
    std::string names;
    for (const std::string& d : diff) names += (names.empty() ? "" : ", ") + d;
    out += "note: the runs differ in " + names + "\n";
  }
  return out;
}

std::string compare_html(const std::vector<ComparedRun>& runs) {
  std::string body = fmt::format("<h1>moeserve bench compare: {} runs</h1>", runs.size());
  const std::vector<std::string> diff = differences(runs);
  if (!diff.empty()) {
    std::string names;
    for (const std::string& d : diff) names += (names.empty() ? "" : ", ") + d;
    body += "<p id=\"differences\" class=\"note\">The runs differ in " + html_escape(names) +
            ": ratios compare unlike things there.</p>";
  }
  body += "<table id=\"compare\"><tr><th></th>";
  for (size_t i = 0; i < runs.size(); ++i) body += fmt::format("<th>[{}] {}</th>", i + 1, html_escape(runs[i].label));
  body += "</tr><tr><th>verdict</th>";
  for (const ComparedRun& run : runs) {
    const std::string v = text_at(run.result, {"validity"});
    body += fmt::format("<td class=\"{}\">{}</td>", v == "VALID" ? "valid" : "invalid", html_escape(v));
  }
  body += "</tr>";
  for (const char* key : {"scenario", "sut_name", "date"}) {
    body += fmt::format("<tr><th>{}</th>", key);
    for (const ComparedRun& run : runs) body += "<td>" + html_escape(text_at(run.result, {key})) + "</td>";
    body += "</tr>";
  }
  for (const ComparedMetric& m : compared_metrics(runs)) {
    body += fmt::format("<tr><th>{}</th>", html_escape(m.unit.empty() ? m.name : m.name + " (" + m.unit + ")"));
    for (size_t i = 0; i < runs.size(); ++i) {
      body += fmt::format("<td>{}", format_value(m.values[i]));
      if (i > 0 && m.ratio(i))
        body += fmt::format(" <span class=\"ratio {}\">{}</span>", ratio_class(m, i), ratio_text(m, i));
      body += "</td>";
    }
    body += "</tr>";
  }
  body +=
      "</table><p>Ratios: each run's value over run [1]'s; green where that is better (higher throughput, "
      "lower latency), red where worse.</p>";
  return "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>moeserve bench compare</title><style>"
         "body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse}"
         "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f4f4f4}"
         "td.valid{background:#1e8449;color:#fff;font-weight:bold}td.invalid{background:#b03a2e;color:#fff;"
         "font-weight:bold}.ratio{font-size:12px}.better{color:#1e8449}.worse{color:#b03a2e}.note{color:#8a5a00}"
         "</style></head><body>" +
         body + "</body></html>\n";
}

}  // namespace moeserve::bench
