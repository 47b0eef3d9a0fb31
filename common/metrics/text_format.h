// Pieces of the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8::metrics {

// A sample value as Prometheus reads it: integral values without exponent or decimal
// point ("42", "1000000", not "1e+06"), others in the shortest form that reads back to
// the same double ("0.005", "1e-07"), and "+Inf", "-Inf", "NaN".
std::string format_value(double value);

// HELP text: backslash and newline escaped as \\ and \n.
std::string escape_help(std::string_view help);

// Label value: backslash, double quote and newline escaped as \\, \" and \n.
std::string escape_label_value(std::string_view value);

// `a="x",b="y"` (no braces) for label names and values of equal length. Families render
// this once per series, when the series is created, not at every scrape.
std::string render_labels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values);

// Appends one sample line: `<name><suffix>{<labels>[,<extra>]} <value>\n`, without
// braces when there are no labels at all. `labels` comes from RenderLabels; `extra` is a
// further rendered pair (a histogram bucket's le="0.1") or empty.
void append_sample(std::string& out, std::string_view name, std::string_view suffix,
                  std::string_view labels, std::string_view extra, double value);

}  // namespace fp8::metrics
