// The bench's own outputs beside LoadGen's: moeserve_result.json with every number of the run (LoadGen's metrics,
// the verdict, every reason and a row per constraint, per-sample times, rates and concurrency over time, the
// engine's own series in process, energy, and what is needed to reproduce the run), and moeserve_report.html
// (report_html.cc), one self-contained page (inline SVG, no scripts, nothing fetched) a submitter acts on: a
// verdict banner with its reasons, the constraints table, per-sample and over-time views, find-peak probes, and
// the settings with their sources.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/driver.h"

namespace moeserve::bench {

// `context` holds what the run itself does not know: benchmark and scenario names, the dataset's description,
// the SUT's description, the build and host, the GPUs, the flags; it is stored under "reproducibility".
nlohmann::json result_json(const RunResult& run, const nlohmann::json& context);

// LoadGen's TestSettings as the result JSON records them (field names, *_ns in ns).
nlohmann::json requested_settings_json(const TestSettings& settings);

std::string report_html(const nlohmann::json& result);

// Writes both files into `dir`; returns the HTML report's path.
std::string write_reports(const std::string& dir, const nlohmann::json& result);

// The lines the command prints at the end: the verdict, the headline metric and the reasons.
std::string result_headline(const nlohmann::json& result);

}  // namespace moeserve::bench
