// Small inline SVG charts for the self-contained HTML report: no scripts, fonts or files from elsewhere.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace moeserve::bench {

struct Marker {
  double x = 0;
  std::string label;  // drawn beside the line
  std::string color;  // CSS colour
};

// A histogram of `values` in `bins` bins, with vertical marker lines (limits, percentiles).
std::string svg_histogram(const std::vector<double>& values, const std::string& title, const std::string& x_label,
                          const std::vector<Marker>& markers, int bins = 40);

// A line chart of y against x.
std::string svg_line_chart(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& title,
                           const std::string& x_label, const std::string& y_label);

// Escapes text for HTML and SVG.
std::string html_escape(const std::string& text);

}  // namespace moeserve::bench
