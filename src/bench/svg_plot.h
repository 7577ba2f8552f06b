// Small inline SVG charts for the self-contained HTML report: no scripts, fonts or files from elsewhere. Every
// chart carries data-chart="<id>" so that a test (or a reader's browser search) can find it.
#pragma once

#include <string>
#include <vector>

namespace moeserve::bench {

// A labelled line across the plot at a value of one axis: a limit, a percentile, a peak.
struct Marker {
  double at = 0;
  std::string label;  // drawn beside the line
  std::string color;  // CSS colour
};

struct ChartSpec {
  std::string id;  // data-chart attribute
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Marker> x_markers;  // vertical lines
  std::vector<Marker> y_markers;  // horizontal lines
};

// One set of points, drawn as a polyline or as dots.
struct Series {
  std::vector<double> x, y;
  std::string label;  // in the legend (empty: no legend entry)
  std::string color;
  bool dots = false;
};

// Round axis ticks covering [lo, hi]: a step of 1, 2 or 5 times a power of ten, the one closest to (hi - lo) /
// (target - 1), from the last multiple at or below lo to the first at or above hi (Heckbert's "nice numbers").
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

// A histogram of `values` in about `bins` bins, with the spec's x markers (limits, percentiles).
std::string svg_histogram(const std::vector<double>& values, const ChartSpec& spec, int bins = 40);

// Lines and dots over shared axes (y from 0), with a legend and the spec's markers.
std::string svg_chart(const std::vector<Series>& series, const ChartSpec& spec);

// Escapes text for HTML and SVG.
std::string html_escape(const std::string& text);

}  // namespace moeserve::bench
