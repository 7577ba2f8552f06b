// The bench's own outputs beside LoadGen's: moeserve_result.json with every number of the run (LoadGen's metrics,
// the verdict and all its reasons, per-sample times, throughput and concurrency over time, energy, and what is
// needed to reproduce the run), and moeserve_report.html, a self-contained page with inline SVG plots (TTFT and
// TPOT distributions against their limits, throughput and concurrency over time).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/driver.h"

namespace moeserve::bench {

// `context` holds what the run itself does not know: benchmark and scenario names, the dataset's description,
// the SUT's description, the build and host, the GPUs, the flags; it is stored under "reproducibility".
nlohmann::json result_json(const RunResult& run, const nlohmann::json& context);

std::string report_html(const nlohmann::json& result);

// Writes both files into `dir`; returns the HTML report's path.
std::string write_reports(const std::string& dir, const nlohmann::json& result);

// The lines the command prints at the end: the verdict, the headline metric and the reasons.
std::string result_headline(const nlohmann::json& result);

}  // namespace moeserve::bench
