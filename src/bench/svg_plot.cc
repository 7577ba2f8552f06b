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

// A tick value format that stays short whatever the scale.
std::string tick(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-2)) return fmt::format("{:.2g}", v);
  return fmt::format("{:.4g}", v);
}

struct Frame {
  double x0, x1, y0, y1;
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kWidth - kLeft - kRight); }
  double py(double y) const { return kHeight - kBottom - (y - y0) / (y1 - y0) * (kHeight - kTop - kBottom); }
};

// The frame, axes with five ticks each, the title and axis labels.
std::string axes(const Frame& f, const std::string& title, const std::string& x_label, const std::string& y_label) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">"
      "<text x=\"{2}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{3}</text>",
      kWidth, kHeight, kLeft, html_escape(title));
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>", kLeft, kTop,
                   kWidth - kLeft - kRight, kHeight - kTop - kBottom);
  for (int i = 0; i <= 4; ++i) {
    const double x = f.x0 + (f.x1 - f.x0) * i / 4;
    const double y = f.y0 + (f.y1 - f.y0) * i / 4;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", f.px(x),
                     kHeight - kBottom + 14, tick(x));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", kLeft - 4, f.py(y) + 4, tick(y));
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>", (kLeft + kWidth - kRight) / 2,
                   kHeight - 8, html_escape(x_label));
  s += fmt::format("<text x=\"14\" y=\"{:.1f}\" transform=\"rotate(-90 14 {:.1f})\" text-anchor=\"middle\">{}</text>",
                   (kTop + kHeight - kBottom) / 2, (kTop + kHeight - kBottom) / 2, html_escape(y_label));
  return s;
}

std::string empty_chart(const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} 60\" width=\"{0}\" height=\"60\" "
      "font-family=\"sans-serif\" font-size=\"12\"><text x=\"10\" y=\"20\" font-weight=\"bold\">{1}</text>"
      "<text x=\"10\" y=\"42\">no data</text></svg>",
      kWidth, html_escape(title));
}

}  // namespace

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

std::string svg_histogram(const std::vector<double>& values, const std::string& title, const std::string& x_label,
                          const std::vector<Marker>& markers, int bins) {
  if (values.empty()) return empty_chart(title);
  double lo = *std::min_element(values.begin(), values.end());
  double hi = *std::max_element(values.begin(), values.end());
  for (const Marker& m : markers) {
    lo = std::min(lo, m.x);
    hi = std::max(hi, m.x);
  }
  lo = std::min(lo, 0.0);
  if (hi <= lo) hi = lo + 1;
  hi += (hi - lo) * 0.02;
  std::vector<int> counts(static_cast<size_t>(bins), 0);
  for (double v : values) {
    const auto b = std::clamp(static_cast<int>((v - lo) / (hi - lo) * bins), 0, bins - 1);
    ++counts[static_cast<size_t>(b)];
  }
  const Frame f{lo, hi, 0, static_cast<double>(*std::max_element(counts.begin(), counts.end())) * 1.1};
  std::string s = axes(f, title, x_label, "samples");
  for (int b = 0; b < bins; ++b) {
    if (counts[static_cast<size_t>(b)] == 0) continue;
    const double x = lo + (hi - lo) * b / bins;
    const double w = f.px(lo + (hi - lo) / bins) - f.px(lo);
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#4e79a7\"/>", f.px(x),
                     f.py(counts[static_cast<size_t>(b)]), std::max(w - 1, 1.0),
                     f.py(0) - f.py(counts[static_cast<size_t>(b)]));
  }
  double label_y = kTop + 12;
  for (const Marker& m : markers) {
    // Labels go right of their line, or left of it near the right edge.
    const bool left = f.px(m.x) > kWidth - kRight - 80;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"2\" "
        "stroke-dasharray=\"5,3\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\" fill=\"{3}\" "
        "text-anchor=\"{7}\">{6}</text>",
        f.px(m.x), kTop, kHeight - kBottom, m.color, f.px(m.x) + (left ? -4 : 4), label_y, html_escape(m.label),
        left ? "end" : "start");
    label_y += 14;
  }
  return s + "</svg>";
}

std::string svg_line_chart(const std::vector<double>& xs, const std::vector<double>& ys, const std::string& title,
                           const std::string& x_label, const std::string& y_label) {
  if (xs.size() < 2 || xs.size() != ys.size()) return empty_chart(title);
  const double y_max = std::max(*std::max_element(ys.begin(), ys.end()) * 1.1, 1e-9);
  const Frame f{xs.front(), xs.back() > xs.front() ? xs.back() : xs.front() + 1, 0, y_max};
  std::string s = axes(f, title, x_label, y_label);
  std::string points;
  for (size_t i = 0; i < xs.size(); ++i) points += fmt::format("{:.1f},{:.1f} ", f.px(xs[i]), f.py(ys[i]));
  s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"#e15759\" stroke-width=\"1.5\"/>", points);
  return s + "</svg>";
}

}  // namespace moeserve::bench
