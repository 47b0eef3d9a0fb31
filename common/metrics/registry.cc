#include "common/metrics/registry.h"

#include "common/metrics/check.h"
#include "prometheus/text_serializer.h"

namespace fp8::metrics {
namespace {

// "counter{a,b}" or "histogram{a}[0.1,1]" for the clash message.
std::string describe(MetricType type, const std::vector<std::string>& labels,
                     const std::vector<double>& bounds) {
  std::string out = type_name(type);
  out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ',';
    out += labels[i];
  }
  out += '}';
  if (type == MetricType::kHistogram) {
    out += '[';
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (i > 0) out += ',';
      out += internal::number_text(bounds[i]);
    }
    out += ']';
  }
  return out;
}

}  // namespace

Registry::Registry() {
  // Built directly: its own drops (more than max_series families) must not recurse.
  auto dropped = std::make_unique<CounterFamily>(
      MetricType::kCounter, kSeriesDroppedName,
      "Series not created because their metric family had reached its series cap.",
      std::vector<std::string>{"family"}, kDefaultMaxSeries, std::vector<double>{},
      [] { return std::make_unique<Counter>(); });
  dropped_ = dropped.get();
  families_.emplace(kSeriesDroppedName, std::move(dropped));
}

FamilyBase& Registry::get_or_add(MetricType type, const std::string& name,
                               const std::vector<std::string>& label_names,
                               const std::vector<double>& bounds,
                               const std::function<std::unique_ptr<FamilyBase>()>& make) {
  internal::check_names(name, label_names);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    std::unique_ptr<FamilyBase> family = make();
    CounterFamily* dropped = dropped_;
    family->set_on_dropped([dropped](const std::string& f) { dropped->with({f}).inc(); });
    it = families_.emplace(name, std::move(family)).first;
    return *it->second;
  }
  FamilyBase& existing = *it->second;
  if (existing.type() != type || existing.label_names() != label_names ||
      existing.bounds() != bounds) {
    internal::fatal("metric " + name + " declared twice: as " +
                    describe(existing.type(), existing.label_names(), existing.bounds()) +
                    " and as " + describe(type, label_names, bounds));
  }
  return existing;
}

CounterFamily& Registry::counter(std::string name, std::string help,
                                 std::vector<std::string> label_names, size_t max_series) {
  auto make = [&]() -> std::unique_ptr<FamilyBase> {
    return std::make_unique<CounterFamily>(MetricType::kCounter, name, help, label_names,
                                           max_series, std::vector<double>{},
                                           [] { return std::make_unique<Counter>(); });
  };
  return static_cast<CounterFamily&>(get_or_add(MetricType::kCounter, name, label_names, {}, make));
}

GaugeFamily& Registry::gauge(std::string name, std::string help,
                             std::vector<std::string> label_names, size_t max_series) {
  auto make = [&]() -> std::unique_ptr<FamilyBase> {
    return std::make_unique<GaugeFamily>(MetricType::kGauge, name, help, label_names,
                                         max_series, std::vector<double>{},
                                         [] { return std::make_unique<Gauge>(); });
  };
  return static_cast<GaugeFamily&>(get_or_add(MetricType::kGauge, name, label_names, {}, make));
}

HistogramFamily& Registry::histogram(std::string name, std::string help,
                                     std::vector<std::string> label_names,
                                     std::vector<double> buckets, size_t max_series) {
  const std::vector<double> bounds = internal::checked_buckets(name, std::move(buckets));
  auto make = [&]() -> std::unique_ptr<FamilyBase> {
    return std::make_unique<HistogramFamily>(
        MetricType::kHistogram, name, help, label_names, max_series, bounds,
        [bounds] { return std::make_unique<Histogram>(bounds); });
  };
  return static_cast<HistogramFamily&>(
      get_or_add(MetricType::kHistogram, name, label_names, bounds, make));
}

void Registry::add_collector(std::function<void()> collect) {
  auto shared = std::make_shared<const std::function<void()>>(std::move(collect));
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(shared));
}

std::string Registry::expose() const {
  std::lock_guard<std::mutex> scrape(expose_mu_);
  // Copied so that collectors run without mu_ (they may declare families or add
  // collectors themselves).
  std::vector<std::shared_ptr<const std::function<void()>>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) (*collect)();

  std::vector<prometheus::MetricFamily> families;
  {
    std::lock_guard<std::mutex> lock(mu_);
    families.reserve(families_.size());
    for (const auto& [name, family] : families_) families.push_back(family->collect());
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace fp8::metrics
