// A metric family: one name, help text, type and set of label names, and its series (the
// children, prometheus-cpp's metrics), one per distinct tuple of label values.
//
// A thin layer over prometheus-cpp for what its own Family does not do: a cap on the
// series (counted in fp8_metrics_series_dropped_total), removal by one label's value,
// removal that is safe against a concurrent with() (below), and series sorted by label
// values in the exposition.
//
// Children live in a std::map keyed by their label values, so the exposition lists them
// sorted and a child's address stays stable until it is removed: callers may keep the
// Counter& that with() returned and update it without further lookups.
//
// Removing a child (remove, remove_if, clear) stops its export at once, but frees it
// only kRetiredGrace later. So the usual one-liner `family.with({job}).set(x)` on a
// report thread may race the removal of that job's series on another thread: the late
// set() lands in the retired child and is lost, instead of writing freed memory. A
// reference kept for longer than that must not outlive the removal of its series.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics/counter.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"

namespace fp8::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// How long a removed child stays allocated (not exported) before it is freed; see above.
inline constexpr std::chrono::seconds kRetiredGrace{10};

// "counter", "gauge", "histogram": the word on the # TYPE line.
const char* type_name(MetricType type);

// What every family has, independent of its child type: identity, its collection into
// prometheus-cpp's data model, and the accounting of series dropped at the cap.
class FamilyBase {
 public:
  FamilyBase(MetricType type, std::string name, std::string help,
             std::vector<std::string> label_names, size_t max_series,
             std::vector<double> bounds);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  MetricType type() const { return type_; }
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  size_t max_series() const { return max_series_; }
  // Histogram bucket bounds; empty for counters and gauges.
  const std::vector<double>& bounds() const { return bounds_; }

  // The family and every series (none is fine: Prometheus and promtool accept a family
  // without samples), for prometheus-cpp's TextSerializer.
  prometheus::MetricFamily collect() const;

  // Called with the family name each time with() hits the series cap. The Registry points
  // it at fp8_metrics_series_dropped_total{family}. Set before the family is shared.
  void set_on_dropped(std::function<void(const std::string&)> on_dropped) {
    on_dropped_ = std::move(on_dropped);
  }

 protected:
  virtual void collect_series(std::vector<prometheus::ClientMetric>& out) const = 0;
  // Aborts unless `values` has one entry per label name; `op` names the caller.
  void check_label_count(const std::vector<std::string>& values, const char* op) const;
  // Position of `label` in label_names(); aborts when the family has no such label.
  size_t label_index(std::string_view label) const;
  void count_dropped() const;

 private:
  const MetricType type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const size_t max_series_;
  const std::vector<double> bounds_;
  std::function<void(const std::string&)> on_dropped_;
};

template <typename Child>
class Family final : public FamilyBase {
 public:
  using MakeChild = std::function<std::unique_ptr<Child>()>;

  Family(MetricType type, std::string name, std::string help,
         std::vector<std::string> label_names, size_t max_series, std::vector<double> bounds,
         MakeChild make_child)
      : FamilyBase(type, std::move(name), std::move(help), std::move(label_names),
                   max_series, std::move(bounds)),
        make_child_(std::move(make_child)),
        detached_(make_child_()) {}

  // The child for these label values (in label_names() order), created on first use.
  // Aborts on a wrong number of values. When the family already holds max_series()
  // children, no series is created: this returns a detached child, shared by all such
  // calls and never exported, so callers need not check, and the drop is counted.
  Child& with(std::vector<std::string> label_values = {}) {
    check_label_count(label_values, "with");
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = series_.find(label_values);
      if (it != series_.end()) return *it->second.child;
      if (series_.size() < max_series()) {
        purge_retired();
        std::vector<prometheus::ClientMetric::Label> labels;
        for (size_t i = 0; i < label_values.size(); ++i) labels.push_back({label_names()[i], label_values[i]});
        Series& s = series_[std::move(label_values)];
        s.child = make_child_();
        s.labels = std::move(labels);
        return *s.child;
      }
    }
    count_dropped();  // outside mu_: it updates another family
    return *detached_;
  }

  // Removes the series with exactly these label values; false when there was none.
  bool remove(const std::vector<std::string>& label_values) {
    check_label_count(label_values, "remove");
    std::lock_guard<std::mutex> lock(mu_);
    purge_retired();
    auto it = series_.find(label_values);
    if (it == series_.end()) return false;
    retire(it);
    return true;
  }

  // Removes every series whose label `label_name` equals `value` (all series of
  // job_id="job-7"); returns how many. Aborts when the family has no such label.
  size_t remove_if(std::string_view label_name, std::string_view value) {
    const size_t index = label_index(label_name);
    std::lock_guard<std::mutex> lock(mu_);
    purge_retired();
    size_t removed = 0;
    for (auto it = series_.begin(); it != series_.end();) {
      if (it->first[index] == value) {
        it = retire(it);
        ++removed;
      } else {
        ++it;
      }
    }
    return removed;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    purge_retired();
    for (auto it = series_.begin(); it != series_.end();) it = retire(it);
  }

  // Number of exported series.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return series_.size();
  }

 private:
  struct Series {
    std::unique_ptr<Child> child;
    std::vector<prometheus::ClientMetric::Label> labels;  // in label_names() order
  };

  using SeriesMap = std::map<std::vector<std::string>, Series>;
  using Clock = std::chrono::steady_clock;
  struct Retired {
    Clock::time_point freed_after;
    std::unique_ptr<Child> child;
  };

  // Both under mu_. Retire moves the child to retired_ and erases its series.
  typename SeriesMap::iterator retire(typename SeriesMap::iterator it) {
    retired_.push_back({Clock::now() + kRetiredGrace, std::move(it->second.child)});
    return series_.erase(it);
  }
  void purge_retired() {
    const Clock::time_point now = Clock::now();
    while (!retired_.empty() && retired_.front().freed_after <= now) retired_.pop_front();
  }

  void collect_series(std::vector<prometheus::ClientMetric>& out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(series_.size());
    for (const auto& [values, s] : series_) {
      prometheus::ClientMetric& m = out.emplace_back(s.child->collect());
      m.label = s.labels;
    }
  }

  const MakeChild make_child_;
  const std::unique_ptr<Child> detached_;
  mutable std::mutex mu_;
  SeriesMap series_;
  std::deque<Retired> retired_;  // oldest first
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

}  // namespace fp8::metrics
