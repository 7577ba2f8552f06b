// moeserve bench compare A.json B.json ...: two or more moeserve_result.json files side by side (moeserve against
// a vLLM endpoint on the same dataset and settings, one build against the next), every metric with its ratio to
// the first run, and what differs between the runs (scenario, dataset, target qps, bounds) said up front.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moeserve::bench {

struct ComparedRun {
  std::string label;  // the file's path, as given
  nlohmann::json result;
};

struct ComparedMetric {
  std::string name;
  std::string unit;
  bool higher_is_better = true;
  std::vector<std::optional<double>> values;  // per run; absent where the run has no such metric
  // values[i] / values[0], where both are there and values[0] is not 0.
  std::optional<double> ratio(size_t run) const;
};

std::vector<ComparedMetric> compared_metrics(const std::vector<ComparedRun>& runs);
// "scenario", "dataset", "target qps", ... for each setting whose value is not the same in every run.
std::vector<std::string> differences(const std::vector<ComparedRun>& runs);

// A fixed-width table for the terminal: one column per run, "value (x ratio)" from the second run on.
std::string compare_text(const std::vector<ComparedRun>& runs);
// One self-contained page: each run's verdict, the metric table with ratios, the differences.
std::string compare_html(const std::vector<ComparedRun>& runs);

}  // namespace moeserve::bench
