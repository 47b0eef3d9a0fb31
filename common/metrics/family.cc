#include "common/metrics/family.h"

#include "common/metrics/check.h"

namespace fp8::metrics {

const char* type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

FamilyBase::FamilyBase(MetricType type, std::string name, std::string help,
                       std::vector<std::string> label_names, size_t max_series,
                       std::vector<double> bounds)
    : type_(type),
      name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      max_series_(max_series),
      bounds_(std::move(bounds)) {}

namespace {

prometheus::MetricType prometheus_type(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return prometheus::MetricType::Counter;
    case MetricType::kGauge:
      return prometheus::MetricType::Gauge;
    case MetricType::kHistogram:
      return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

// prometheus-cpp's TextSerializer writes HELP as it is given; the format wants backslash
// and newline escaped.
std::string escape_help(const std::string& help) {
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

}  // namespace

prometheus::MetricFamily FamilyBase::collect() const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = escape_help(help_);
  family.type = prometheus_type(type_);
  collect_series(family.metric);
  return family;
}

void FamilyBase::check_label_count(const std::vector<std::string>& values, const char* op) const {
  if (values.size() == label_names_.size()) return;
  std::string names;
  for (const std::string& n : label_names_) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  internal::fatal("metric " + name_ + ": " + op + "() got " + std::to_string(values.size()) +
                  " label values, want " + std::to_string(label_names_.size()) + " (" +
                  names + ")");
}

size_t FamilyBase::label_index(std::string_view label) const {
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (label_names_[i] == label) return i;
  }
  internal::fatal("metric " + name_ + " has no label '" + std::string(label) + "'");
}

void FamilyBase::count_dropped() const {
  if (on_dropped_) on_dropped_(name_);
}

}  // namespace fp8::metrics
