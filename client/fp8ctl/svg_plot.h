// Line charts as a standalone SVG document, for `fp8ctl plot`: series in, SVG text out.
// Pure (no I/O), so that the unit test pins the structure down.
//
// Every chart gets one <polyline> per series (in the series' colour, points sorted by x;
// non-finite points are left out and counted in the chart's title), a circle on a series
// with a single point, x and y axes with tick labels, and the chart title. One legend at
// the top names every series with its colour.
#pragma once

#include <string>
#include <vector>

namespace fp8::ctl {

struct PlotPoint {
  double x = 0;
  double y = 0;
};

struct PlotSeries {
  std::vector<PlotPoint> points;
};

struct PlotChart {
  std::string title;    // "loss"
  std::string x_label;  // "step"
  // One per legend entry, in the same order (an empty series still gets its polyline).
  std::vector<PlotSeries> series;
};

struct PlotDocument {
  std::vector<std::string> legend;  // "job-3 tiny-cpu (tensorwise)", one per series
  std::vector<PlotChart> charts;    // stacked top to bottom
};

// The colour of series `i` (distinct for the first 10, then repeating): "#1f77b4".
std::string series_colour(size_t i);

// Tick values covering [lo, hi] at a "nice" step (1, 2 or 5 times a power of ten); about
// `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

// The whole document, starting with "<svg" and ending with "</svg>\n".
std::string render_svg(const PlotDocument& doc);

// &, <, >, " and ' as entities.
std::string xml_escape(const std::string& text);

}  // namespace fp8::ctl
