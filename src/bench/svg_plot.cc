#include "bench/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace moeserve::bench {
namespace {

constexpr double kWidth = 640;
constexpr double kHeight = 300;
constexpr double kLeft = 64;
constexpr double kRight = 16;
constexpr double kTop = 28;
constexpr double kBottom = 44;

// The number of the form 1, 2, 5 or 10 times a power of ten closest to `x`.
double nice_number(double x) {
  const double exponent = std::floor(std::log10(x));
  const double fraction = x / std::pow(10, exponent);
  const double nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  return nice * std::pow(10, exponent);
}

// A tick's text with as many decimals as its step needs (0.1 steps print 0.3, not 0.30000000000000004).
std::string tick_text(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", std::abs(v) < step * 1e-6 ? 0.0 : v, decimals);
}

struct Frame {
  std::vector<double> xt, yt;  // ticks; the axes span the first to the last
  double x0() const { return xt.front(); }
  double x1() const { return xt.back(); }
  double y0() const { return yt.front(); }
  double y1() const { return yt.back(); }
  double px(double x) const { return kLeft + (x - x0()) / (x1() - x0()) * (kWidth - kLeft - kRight); }
  double py(double y) const { return kHeight - kBottom - (y - y0()) / (y1() - y0()) * (kHeight - kTop - kBottom); }
};

Frame frame(double x_lo, double x_hi, double y_lo, double y_hi) {
  if (!(x_hi > x_lo)) x_hi = x_lo + 1;
  if (!(y_hi > y_lo)) y_hi = y_lo + 1;
  return {nice_ticks(x_lo, x_hi, 6), nice_ticks(y_lo, y_hi)};
}

std::string open_svg(const ChartSpec& spec) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" data-chart=\"{0}\" viewBox=\"0 0 {1} {2}\" width=\"{1}\" "
      "height=\"{2}\" font-family=\"sans-serif\" font-size=\"11\"><title>{3}</title>"
      "<text x=\"{4}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{3}</text>",
      html_escape(spec.id), kWidth, kHeight, html_escape(spec.title), kLeft);
}

// The frame, grid lines at the ticks, tick labels, and axis labels.
std::string axes(const Frame& f, const ChartSpec& spec) {
  std::string s = open_svg(spec);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", kLeft, kTop,
                   kWidth - kLeft - kRight, kHeight - kTop - kBottom);
  const double x_step = f.xt.size() > 1 ? f.xt[1] - f.xt[0] : 1;
  const double y_step = f.yt.size() > 1 ? f.yt[1] - f.yt[0] : 1;
  for (double x : f.xt) {
    s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/>", f.px(x), kTop,
                     kHeight - kBottom);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", f.px(x),
                     kHeight - kBottom + 14, tick_text(x, x_step));
  }
  for (double y : f.yt) {
    s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>", kLeft,
                     kWidth - kRight, f.py(y));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", kLeft - 4, f.py(y) + 4,
                     tick_text(y, y_step));
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", (kLeft + kWidth - kRight) / 2,
                   kHeight - 8, html_escape(spec.x_label));
  s +=
      fmt::format("<text x=\"14\" y=\"{0:.1f}\" transform=\"rotate(-90 14 {0:.1f})\" text-anchor=\"middle\">{1}</text>",
                  (kTop + kHeight - kBottom) / 2, html_escape(spec.y_label));
  return s;
}

std::string markers(const Frame& f, const ChartSpec& spec) {
  std::string s;
  double label_y = kTop + 12;
  for (const Marker& m : spec.x_markers) {
    // Labels go right of their line, or left of it near the right edge.
    const bool left = f.px(m.at) > kWidth - kRight - 80;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"2\" "
        "stroke-dasharray=\"5,3\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\" fill=\"{3}\" text-anchor=\"{7}\">{6}</text>",
        f.px(m.at), kTop, kHeight - kBottom, m.color, f.px(m.at) + (left ? -4 : 4), label_y, html_escape(m.label),
        left ? "end" : "start");
    label_y += 14;
  }
  for (const Marker& m : spec.y_markers) {
    s += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"2\" "
        "stroke-dasharray=\"5,3\"/><text x=\"{4}\" y=\"{5:.1f}\" fill=\"{3}\" text-anchor=\"end\">{6}</text>",
        kLeft, kWidth - kRight, f.py(m.at), m.color, kWidth - kRight - 4, f.py(m.at) - 4, html_escape(m.label));
  }
  return s;
}

std::string empty_chart(const ChartSpec& spec) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" data-chart=\"{0}\" viewBox=\"0 0 {1} 60\" width=\"{1}\" "
      "height=\"60\" font-family=\"sans-serif\" font-size=\"12\"><text x=\"10\" y=\"20\" font-weight=\"bold\">{2}"
      "</text><text x=\"10\" y=\"42\">no data</text></svg>",
      html_escape(spec.id), kWidth, html_escape(spec.title));
}

void widen(double v, double& lo, double& hi) {
  lo = std::min(lo, v);
  hi = std::max(hi, v);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double step = nice_number((hi - lo) / std::max(1, target - 1));
  const double first = std::floor(lo / step + 1e-9) * step;
  const double last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (double t = first; t <= last + step * 0.5; t += step) ticks.push_back(t);
  if (ticks.size() < 2) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_histogram(const std::vector<double>& values, const ChartSpec& spec, int bins) {
  if (values.empty()) return empty_chart(spec);
  double lo = 0, hi = *std::max_element(values.begin(), values.end());
  widen(*std::min_element(values.begin(), values.end()), lo, hi);
  for (const Marker& m : spec.x_markers) widen(m.at, lo, hi);
  if (!(hi > lo)) hi = lo + 1;
  // Bins of equal width over the axis's round span, so that bin edges fall on fractions of the ticks.
  const std::vector<double> xt = nice_ticks(lo, hi, 6);
  const double x0 = xt.front(), x1 = xt.back();
  std::vector<int> counts(static_cast<size_t>(bins), 0);
  for (double v : values)
    ++counts[static_cast<size_t>(std::clamp(static_cast<int>((v - x0) / (x1 - x0) * bins), 0, bins - 1))];
  Frame f{xt, nice_ticks(0, std::max(1, *std::max_element(counts.begin(), counts.end())))};
  std::string s = axes(f, spec);
  for (int b = 0; b < bins; ++b) {
    const int n = counts[static_cast<size_t>(b)];
    if (n == 0) continue;
    const double w = f.px(x0 + (x1 - x0) / bins) - f.px(x0);
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#4e79a7\"/>",
                     f.px(x0 + (x1 - x0) * b / bins), f.py(n), std::max(w - 1, 1.0), f.py(0) - f.py(n));
  }
  return s + markers(f, spec) + "</svg>";
}

std::string svg_chart(const std::vector<Series>& series, const ChartSpec& spec) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_hi = 0;
  size_t points = 0;
  for (const Series& one : series) {
    for (size_t i = 0; i < std::min(one.x.size(), one.y.size()); ++i) {
      widen(one.x[i], x_lo, x_hi);
      y_hi = std::max(y_hi, one.y[i]);
      ++points;
    }
  }
  if (points == 0) return empty_chart(spec);
  for (const Marker& m : spec.x_markers) widen(m.at, x_lo, x_hi);
  y_hi *= 1.05;  // a margin above the highest point; markers may sit on the frame
  for (const Marker& m : spec.y_markers) y_hi = std::max(y_hi, m.at);
  const Frame f = frame(x_lo, x_hi, 0, y_hi);
  std::string s = axes(f, spec);
  double legend_x = kLeft + 8;
  for (const Series& one : series) {
    const size_t n = std::min(one.x.size(), one.y.size());
    if (one.dots) {
      for (size_t i = 0; i < n; ++i)
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2\" fill=\"{}\" fill-opacity=\"0.6\"/>",
                         f.px(one.x[i]), f.py(one.y[i]), one.color);
    } else if (n > 0) {
      std::string line;
      for (size_t i = 0; i < n; ++i) line += fmt::format("{:.1f},{:.1f} ", f.px(one.x[i]), f.py(one.y[i]));
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>", line, one.color);
    }
    if (one.label.empty()) continue;
    s += fmt::format(
        "<rect x=\"{0:.1f}\" y=\"{1}\" width=\"10\" height=\"10\" fill=\"{2}\"/><text x=\"{3:.1f}\" "
        "y=\"{4}\">{5}</text>",
        legend_x, kTop + 6, one.color, legend_x + 14, kTop + 15, html_escape(one.label));
    legend_x += 24 + 6.5 * static_cast<double>(one.label.size());
  }
  return s + markers(f, spec) + "</svg>";
}

}  // namespace moeserve::bench
