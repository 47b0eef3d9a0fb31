#include "common/metrics/family.h"

#include "common/metrics/check.h"
#include "common/metrics/text_format.h"

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

void FamilyBase::append_text(std::string& out) const {
  out += "# HELP ";
  out += name_;
  if (!help_.empty()) {
    out += ' ';
    out += escape_help(help_);
  }
  out += "\n# TYPE ";
  out += name_;
  out += ' ';
  out += type_name(type_);
  out += '\n';
  append_series(out);
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
