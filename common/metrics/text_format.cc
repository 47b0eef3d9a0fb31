#include "common/metrics/text_format.h"

#include <charconv>
#include <cmath>
#include <cstdint>

namespace fp8::metrics {

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Every integral double below 2^63 converts to int64 exactly, so counters of bytes or
  // tokens print in full rather than as 1.2e+10.
  if (value == std::trunc(value) && std::fabs(value) < 9.2e18) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);  // shortest round trip
  return std::string(buf, result.ptr);
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string render_labels(const std::vector<std::string>& names,
                         const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  return out;
}

void append_sample(std::string& out, std::string_view name, std::string_view suffix,
                  std::string_view labels, std::string_view extra, double value) {
  out += name;
  out += suffix;
  if (!labels.empty() || !extra.empty()) {
    out += '{';
    out += labels;
    if (!labels.empty() && !extra.empty()) out += ',';
    out += extra;
    out += '}';
  }
  out += ' ';
  out += format_value(value);
  out += '\n';
}

}  // namespace fp8::metrics
