// The set of metric families a process exports, and their Prometheus text exposition
// (prometheus-cpp's TextSerializer).
//
//   fp8::metrics::Registry registry;
//   auto& submitted = registry.counter("fp8_jobs_submitted_total", "Jobs submitted.", {"user"});
//   submitted.with({"alice"}).inc();
//   std::string text = registry.expose();  // what GET /metrics serves
//
// Names, label sets and their meanings are a product interface: see deploy/METRICS.md.
// Everything here is thread-safe. Families live as long as the registry; declare them
// once at start-up and keep the references.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/metrics/buckets.h"
#include "common/metrics/family.h"

namespace fp8::metrics {

// The series cap of a family unless its declaration says otherwise (deploy/METRICS.md).
inline constexpr size_t kDefaultMaxSeries = 10000;

// The counter of series that with() did not create because their family was full.
inline constexpr char kSeriesDroppedName[] = "fp8_metrics_series_dropped_total";

class Registry {
 public:
  Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Declare a family, or get the one already declared under this name. Declaring a name
  // again with another type, other label names (or order), or other buckets is a bug and
  // aborts with a message naming both declarations; help and max_series of the first
  // declaration stay. Invalid metric or label names abort too (check.h).
  CounterFamily& counter(std::string name, std::string help, std::vector<std::string> label_names,
                         size_t max_series = kDefaultMaxSeries);
  GaugeFamily& gauge(std::string name, std::string help, std::vector<std::string> label_names,
                     size_t max_series = kDefaultMaxSeries);
  // `buckets`: finite, strictly increasing upper bounds (+Inf is implied), e.g.
  // default_latency_buckets() or exponential_buckets(...).
  HistogramFamily& histogram(std::string name, std::string help,
                             std::vector<std::string> label_names, std::vector<double> buckets,
                             size_t max_series = kDefaultMaxSeries);

  // Runs `collect` at the start of every expose(), before any family is read, so that
  // values kept elsewhere (a queue's depth, /proc) are fresh in each scrape. Collectors
  // run one scrape at a time, in the order added, and without the registry's lock held:
  // they may declare families and call with()/set()/remove(). They must not call
  // expose() (it would deadlock) and must not throw.
  void add_collector(std::function<void()> collect);

  // The Prometheus text format 0.0.4 of every family: sorted by name, each with its
  // # HELP and # TYPE lines, its series sorted by label values.
  std::string expose() const;

 private:
  // The family under `name`, created by `make` if there is none; aborts on a clash.
  FamilyBase& get_or_add(MetricType type, const std::string& name,
                       const std::vector<std::string>& label_names,
                       const std::vector<double>& bounds,
                       const std::function<std::unique_ptr<FamilyBase>()>& make);

  mutable std::mutex mu_;  // guards families_ and collectors_
  std::map<std::string, std::unique_ptr<FamilyBase>> families_;
  std::vector<std::shared_ptr<const std::function<void()>>> collectors_;
  CounterFamily* dropped_ = nullptr;  // fp8_metrics_series_dropped_total{family}

  // Held through a whole expose(): one scrape's collectors at a time, so collectors need
  // not guard against running concurrently with themselves.
  mutable std::mutex expose_mu_;
};

}  // namespace fp8::metrics
