#include "client/fp8ctl/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fp8::ctl {
namespace {

// Layout, in SVG user units (pixels).
constexpr double kWidth = 860;
constexpr double kMarginLeft = 84;
constexpr double kMarginRight = 24;
constexpr double kLegendTop = 16;
constexpr double kLegendRow = 18;
constexpr double kChartTitle = 28;  // title band above each plot area
constexpr double kPlotHeight = 220;
constexpr double kChartBottom = 48;  // x tick labels and the x label below the plot area

struct Range {
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
};

// The axis for values in [lo, hi] (lo > hi: no values): widened to whole tick steps.
Range axis_for(double lo, double hi) {
  if (!(lo <= hi)) {
    lo = 0;
    hi = 1;
  } else if (lo == hi) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.05;
    lo -= pad;
    hi += pad;
  }
  Range r;
  r.ticks = nice_ticks(lo, hi);
  const double step = r.ticks.size() >= 2 ? r.ticks[1] - r.ticks[0] : (hi - lo);
  r.lo = std::min(lo, std::floor(lo / step + 1e-9) * step);
  r.hi = std::max(hi, std::ceil(hi / step - 1e-9) * step);
  r.ticks = nice_ticks(r.lo, r.hi);
  return r;
}

std::string tick_label(double v, double step) {
  if (std::abs(v) < std::abs(step) * 1e-9) v = 0;
  const double a = std::abs(v);
  if (a >= 1e6) return absl::StrFormat("%gM", v / 1e6);
  if (a >= 1e4) return absl::StrFormat("%gk", v / 1e3);
  return absl::StrFormat("%.6g", v);
}

std::string num(double v) { return absl::StrFormat("%.1f", v); }

bool finite(const PlotPoint& p) { return std::isfinite(p.x) && std::isfinite(p.y); }

}  // namespace

std::string series_colour(size_t i) {
  static const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi <= lo || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9 && ticks.size() < 100; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_svg(const PlotDocument& doc) {
  const double legend_height = kLegendTop + kLegendRow * static_cast<double>(doc.legend.size()) + 8;
  const double chart_height = kChartTitle + kPlotHeight + kChartBottom;
  const double height = legend_height + chart_height * static_cast<double>(doc.charts.size()) + 8;
  const double plot_w = kWidth - kMarginLeft - kMarginRight;

  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      static_cast<int>(kWidth), static_cast<int>(height), static_cast<int>(kWidth), static_cast<int>(height));
  absl::StrAppend(&out, "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n");

  // The legend: a colour swatch and the series' name per row.
  absl::StrAppend(&out, "<g class=\"legend\">\n");
  for (size_t i = 0; i < doc.legend.size(); ++i) {
    const double y = kLegendTop + kLegendRow * static_cast<double>(i);
    absl::StrAppend(&out, "<line x1=\"", num(kMarginLeft), "\" y1=\"", num(y + 5), "\" x2=\"", num(kMarginLeft + 24),
                    "\" y2=\"", num(y + 5), "\" stroke=\"", series_colour(i), "\" stroke-width=\"3\"/>\n");
    absl::StrAppend(&out, "<text x=\"", num(kMarginLeft + 32), "\" y=\"", num(y + 9), "\">", xml_escape(doc.legend[i]),
                    "</text>\n");
  }
  absl::StrAppend(&out, "</g>\n");

  for (size_t c = 0; c < doc.charts.size(); ++c) {
    const PlotChart& chart = doc.charts[c];
    const double top = legend_height + chart_height * static_cast<double>(c) + kChartTitle;
    const double bottom = top + kPlotHeight;

    double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
    size_t dropped = 0;
    for (const PlotSeries& s : chart.series) {
      for (const PlotPoint& p : s.points) {
        if (!finite(p)) {
          ++dropped;
          continue;
        }
        x_lo = std::min(x_lo, p.x);
        x_hi = std::max(x_hi, p.x);
        y_lo = std::min(y_lo, p.y);
        y_hi = std::max(y_hi, p.y);
      }
    }
    const Range xr = axis_for(x_lo, x_hi);
    const Range yr = axis_for(y_lo, y_hi);
    auto px = [&](double x) { return kMarginLeft + (x - xr.lo) / (xr.hi - xr.lo) * plot_w; };
    auto py = [&](double y) { return bottom - (y - yr.lo) / (yr.hi - yr.lo) * kPlotHeight; };

    std::string title = chart.title;
    if (dropped > 0) absl::StrAppend(&title, " (", dropped, " non-finite value", dropped == 1 ? "" : "s", " not drawn)");
    absl::StrAppend(&out, "<g class=\"chart\">\n<text x=\"", num(kMarginLeft), "\" y=\"", num(top - 10),
                    "\" font-size=\"14\" font-weight=\"bold\">", xml_escape(title), "</text>\n");
    // Grid lines and tick labels.
    const double xstep = xr.ticks.size() >= 2 ? xr.ticks[1] - xr.ticks[0] : 1;
    const double ystep = yr.ticks.size() >= 2 ? yr.ticks[1] - yr.ticks[0] : 1;
    for (double t : yr.ticks) {
      const double y = py(t);
      absl::StrAppend(&out, "<line x1=\"", num(kMarginLeft), "\" y1=\"", num(y), "\" x2=\"", num(kMarginLeft + plot_w),
                      "\" y2=\"", num(y), "\" stroke=\"#e0e0e0\"/>\n");
      absl::StrAppend(&out, "<text x=\"", num(kMarginLeft - 6), "\" y=\"", num(y + 4), "\" text-anchor=\"end\">",
                      xml_escape(tick_label(t, ystep)), "</text>\n");
    }
    for (double t : xr.ticks) {
      const double x = px(t);
      absl::StrAppend(&out, "<line x1=\"", num(x), "\" y1=\"", num(top), "\" x2=\"", num(x), "\" y2=\"", num(bottom),
                      "\" stroke=\"#e0e0e0\"/>\n");
      absl::StrAppend(&out, "<text x=\"", num(x), "\" y=\"", num(bottom + 16), "\" text-anchor=\"middle\">",
                      xml_escape(tick_label(t, xstep)), "</text>\n");
    }
    // Axes.
    absl::StrAppend(&out, "<line x1=\"", num(kMarginLeft), "\" y1=\"", num(bottom), "\" x2=\"", num(kMarginLeft + plot_w),
                    "\" y2=\"", num(bottom), "\" stroke=\"black\"/>\n");
    absl::StrAppend(&out, "<line x1=\"", num(kMarginLeft), "\" y1=\"", num(top), "\" x2=\"", num(kMarginLeft),
                    "\" y2=\"", num(bottom), "\" stroke=\"black\"/>\n");
    absl::StrAppend(&out, "<text x=\"", num(kMarginLeft + plot_w / 2), "\" y=\"", num(bottom + 36),
                    "\" text-anchor=\"middle\">", xml_escape(chart.x_label), "</text>\n");
    // The series.
    for (size_t i = 0; i < chart.series.size(); ++i) {
      std::vector<PlotPoint> pts;
      for (const PlotPoint& p : chart.series[i].points) {
        if (finite(p)) pts.push_back(p);
      }
      std::stable_sort(pts.begin(), pts.end(), [](const PlotPoint& a, const PlotPoint& b) { return a.x < b.x; });
      std::string coords;
      for (const PlotPoint& p : pts) absl::StrAppend(&coords, coords.empty() ? "" : " ", num(px(p.x)), ",", num(py(p.y)));
      absl::StrAppend(&out, "<polyline fill=\"none\" stroke=\"", series_colour(i), "\" stroke-width=\"2\" points=\"",
                      coords, "\"/>\n");
      if (pts.size() == 1) {
        absl::StrAppend(&out, "<circle cx=\"", num(px(pts[0].x)), "\" cy=\"", num(py(pts[0].y)), "\" r=\"3\" fill=\"",
                        series_colour(i), "\"/>\n");
      }
    }
    absl::StrAppend(&out, "</g>\n");
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

}  // namespace fp8::ctl
