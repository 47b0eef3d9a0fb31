// The exposition of small registries, compared as exact text.
#include "common/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics/build_info.h"

namespace fp8::metrics {
namespace {

// Every registry holds the dropped-series counter, sorted among the others by name, so the
// expected texts below include its header where it falls.
const std::string kDroppedHeader =
    "# HELP fp8_metrics_series_dropped_total Series not created because their metric family "
    "had reached its series cap.\n"
    "# TYPE fp8_metrics_series_dropped_total counter\n";

TEST(Registry, EmptyRegistryHasOnlyTheDroppedCounter) {
  Registry r;
  EXPECT_EQ(r.expose(), kDroppedHeader);
}

TEST(Registry, CounterAndGaugeWithLabelsSortedByValues) {
  Registry r;
  auto& bytes = r.counter("fp8_job_communication_bytes_total", "Bytes moved.",
                          {"job_id", "collective"});
  bytes.with({"job-7", "reduce_scatter"}).inc(1024);
  bytes.with({"job-10", "all_gather"}).inc(3);
  bytes.with({"job-7", "all_gather"}).inc();
  bytes.with({"job-7", "all_gather"}).inc(2);
  r.gauge("fp8_job_loss", "Training loss.", {"job_id"}).with({"job-7"}).set(2.5);

  EXPECT_EQ(r.expose(),
            "# HELP fp8_job_communication_bytes_total Bytes moved.\n"
            "# TYPE fp8_job_communication_bytes_total counter\n"
            "fp8_job_communication_bytes_total{job_id=\"job-10\",collective=\"all_gather\"} 3\n"
            "fp8_job_communication_bytes_total{job_id=\"job-7\",collective=\"all_gather\"} 3\n"
            "fp8_job_communication_bytes_total{job_id=\"job-7\",collective=\"reduce_scatter\"} "
            "1024\n"
            "# HELP fp8_job_loss Training loss.\n"
            "# TYPE fp8_job_loss gauge\n"
            "fp8_job_loss{job_id=\"job-7\"} 2.5\n" +
                kDroppedHeader);
}

TEST(Registry, FamiliesSortedByNameAndEmptyFamiliesKeepTheirHeader) {
  Registry r;
  r.gauge("zeta", "Z.", {});
  r.counter("alpha_total", "A.", {}).with().inc();
  r.gauge("fp8_workers", "Workers.", {"state"});
  EXPECT_EQ(r.expose(),
            "# HELP alpha_total A.\n# TYPE alpha_total counter\nalpha_total 1\n" +
                kDroppedHeader + "# HELP fp8_workers Workers.\n# TYPE fp8_workers gauge\n" +
                "# HELP zeta Z.\n# TYPE zeta gauge\n");
}

TEST(Registry, EscapesHelpAndLabelValues) {
  Registry r;
  r.gauge("g", "back\\slash and\nnewline \"quotes stay\"", {"path"})
      .with({"C:\\dir \"x\"\nnext"})
      .set(1);
  EXPECT_EQ(r.expose(), kDroppedHeader +
                            "# HELP g back\\\\slash and\\nnewline \"quotes stay\"\n"
                            "# TYPE g gauge\n"
                            "g{path=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n");
}

TEST(Registry, GaugeSetIncDec) {
  Registry r;
  Gauge& g = r.gauge("g", "G.", {}).with();
  g.set(10);
  g.inc();
  g.inc(4);
  g.dec(0.5);
  g.dec();
  EXPECT_DOUBLE_EQ(g.value(), 13.5);
}

TEST(Registry, CounterIgnoresNegativeAndNaNIncrements) {
  Registry r;
  Counter& c = r.counter("c_total", "C.", {}).with();
  c.inc(2);
  c.inc(-5);
  c.inc(std::nan(""));
  EXPECT_EQ(c.value(), 2);
  c.set_total(40);
  EXPECT_EQ(c.value(), 40);
}

TEST(Registry, HistogramBucketsSumAndCount) {
  Registry r;
  auto& h = r.histogram("fp8_scheduler_queue_wait_seconds", "Queue wait.", {"device_kind"},
                        {0.005, 0.1, 1});
  Histogram& cpu = h.with({"cpu"});
  cpu.observe(0.001);
  cpu.observe(0.005);  // le is inclusive: bucket 0.005
  cpu.observe(0.5);
  cpu.observe(7);
  cpu.observe(std::nan(""));  // ignored
  EXPECT_EQ(r.expose(),
            kDroppedHeader +
                "# HELP fp8_scheduler_queue_wait_seconds Queue wait.\n"
                "# TYPE fp8_scheduler_queue_wait_seconds histogram\n"
                "fp8_scheduler_queue_wait_seconds_count{device_kind=\"cpu\"} 4\n"
                "fp8_scheduler_queue_wait_seconds_sum{device_kind=\"cpu\"} 7.506\n"
                "fp8_scheduler_queue_wait_seconds_bucket{device_kind=\"cpu\",le=\"0.005\"} 2\n"
                "fp8_scheduler_queue_wait_seconds_bucket{device_kind=\"cpu\",le=\"0.1\"} 2\n"
                "fp8_scheduler_queue_wait_seconds_bucket{device_kind=\"cpu\",le=\"1\"} 3\n"
                "fp8_scheduler_queue_wait_seconds_bucket{device_kind=\"cpu\",le=\"+Inf\"} 4\n");
}

TEST(Registry, HistogramWithoutLabelsAndTrailingInfBound) {
  Registry r;
  r.histogram("h_seconds", "H.", {}, {1, INFINITY}).with().observe(2);
  EXPECT_EQ(r.expose(), kDroppedHeader +
                            "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
                            "h_seconds_count 1\n"
                            "h_seconds_sum 2\n"
                            "h_seconds_bucket{le=\"1\"} 0\n"
                            "h_seconds_bucket{le=\"+Inf\"} 1\n");
}

TEST(Buckets, ExponentialAndDefault) {
  EXPECT_EQ(exponential_buckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1.0}));
  const std::vector<double> d = default_latency_buckets();
  EXPECT_EQ(d.front(), 0.001);
  EXPECT_EQ(d.back(), 10);
  EXPECT_TRUE(std::is_sorted(d.begin(), d.end()));
}

TEST(Registry, DroppedSeriesBeyondTheCapAreCountedAndNotExported) {
  Registry r;
  auto& info = r.gauge("fp8_job_info", "Jobs.", {"job_id"}, /*max_series=*/2);
  info.with({"job-1"}).set(1);
  info.with({"job-2"}).set(1);
  Gauge& over = info.with({"job-3"});
  over.set(1);
  Gauge& over_again = info.with({"job-4"});
  EXPECT_EQ(&over, &over_again);  // one shared detached child
  EXPECT_EQ(&info.with({"job-1"}), &info.with({"job-1"}));  // existing series still served
  EXPECT_EQ(info.size(), 2u);
  EXPECT_EQ(r.expose(),
            "# HELP fp8_job_info Jobs.\n# TYPE fp8_job_info gauge\n"
            "fp8_job_info{job_id=\"job-1\"} 1\n"
            "fp8_job_info{job_id=\"job-2\"} 1\n" +
                kDroppedHeader + "fp8_metrics_series_dropped_total{family=\"fp8_job_info\"} 2\n");

  // Room again after a removal: the series is created for real.
  EXPECT_TRUE(info.remove({"job-1"}));
  EXPECT_NE(&info.with({"job-5"}), &over);
  EXPECT_EQ(info.size(), 2u);
}

TEST(Registry, RemoveRemoveIfAndClear) {
  Registry r;
  auto& cast = r.gauge("fp8_cast_amax", "Amax.", {"job_id", "layer", "tensor"});
  cast.with({"job-7", "l0", "input"}).set(1);
  cast.with({"job-7", "l1", "weight"}).set(2);
  cast.with({"job-8", "l0", "input"}).set(3);
  cast.with({"job-8", "job-7", "input"}).set(4);  // "job-7" in another label: stays

  EXPECT_EQ(cast.remove_if("job_id", "job-7"), 2u);
  EXPECT_EQ(cast.remove_if("job_id", "job-7"), 0u);
  EXPECT_EQ(cast.size(), 2u);
  EXPECT_FALSE(cast.remove({"job-8", "l9", "input"}));
  EXPECT_TRUE(cast.remove({"job-8", "l0", "input"}));
  EXPECT_EQ(r.expose(), "# HELP fp8_cast_amax Amax.\n# TYPE fp8_cast_amax gauge\n"
                        "fp8_cast_amax{job_id=\"job-8\",layer=\"job-7\",tensor=\"input\"} 4\n" +
                            kDroppedHeader);
  cast.clear();
  EXPECT_EQ(cast.size(), 0u);
  // A re-created series starts from zero.
  EXPECT_EQ(cast.with({"job-7", "l0", "input"}).value(), 0);
}

TEST(Registry, RemovedChildStaysUsableButIsNotExported) {
  Registry r;
  auto& loss = r.gauge("fp8_job_loss", "Loss.", {"job_id"});
  Gauge& held = loss.with({"job-7"});  // a report thread's reference
  held.set(1);
  EXPECT_EQ(loss.remove_if("job_id", "job-7"), 1u);
  held.set(2);  // late write after the job ended: harmless (ASan would catch a free)
  EXPECT_EQ(held.value(), 2);
  EXPECT_EQ(r.expose().find("job-7"), std::string::npos);
  EXPECT_EQ(loss.with({"job-7"}).value(), 0);  // a new series, not the retired one
}

TEST(Registry, SameDeclarationReturnsTheSameFamily) {
  Registry r;
  auto& a = r.counter("x_total", "X.", {"a"});
  auto& b = r.counter("x_total", "Other help is fine.", {"a"});
  EXPECT_EQ(&a, &b);
  auto& h1 = r.histogram("h", "H.", {}, {1, 2});
  auto& h2 = r.histogram("h", "H.", {}, {1, 2});
  EXPECT_EQ(&h1, &h2);
}

TEST(Registry, CollectorsRunBeforeEachExposition) {
  Registry r;
  int depth = 0;
  r.add_collector([&] {
    // Collectors may declare families and create series: no registry lock is held.
    r.gauge("fp8_scheduler_queue_depth", "Queued.", {"device_kind"}).with({"cpu"}).set(depth);
  });
  depth = 3;
  EXPECT_EQ(r.expose(), kDroppedHeader +
                            "# HELP fp8_scheduler_queue_depth Queued.\n"
                            "# TYPE fp8_scheduler_queue_depth gauge\n"
                            "fp8_scheduler_queue_depth{device_kind=\"cpu\"} 3\n");
  depth = 5;
  EXPECT_NE(r.expose().find("fp8_scheduler_queue_depth{device_kind=\"cpu\"} 5\n"),
            std::string::npos);
}

TEST(Registry, BuildInfo) {
  Registry r;
  register_build_info(r, "worker", "0.1.0");
  EXPECT_EQ(r.expose(), "# HELP fp8_build_info Build of the running daemon (always 1).\n"
                        "# TYPE fp8_build_info gauge\n"
                        "fp8_build_info{version=\"0.1.0\",component=\"worker\"} 1\n" +
                            kDroppedHeader);
}

// Programming errors abort with a message naming the metric.
using RegistryDeathTest = ::testing::Test;

TEST_F(RegistryDeathTest, ClashingDeclarations) {
  Registry r;
  r.counter("x_total", "X.", {"a"});
  EXPECT_DEATH(r.gauge("x_total", "X.", {"a"}),
               "metric x_total declared twice: as counter\\{a\\} and as gauge\\{a\\}");
  EXPECT_DEATH(r.counter("x_total", "X.", {"b"}), "declared twice");
  EXPECT_DEATH(r.counter("x_total", "X.", {}), "declared twice");
  r.histogram("h", "H.", {}, {1, 2});
  EXPECT_DEATH(r.histogram("h", "H.", {}, {1, 3}), "as histogram\\{\\}\\[1,2\\] and as");
}

TEST_F(RegistryDeathTest, InvalidNames) {
  Registry r;
  EXPECT_DEATH(r.counter("9lives", "", {}), "invalid metric name '9lives'");
  EXPECT_DEATH(r.counter("a-b", "", {}), "invalid metric name");
  EXPECT_DEATH(r.counter("", "", {}), "invalid metric name");
  EXPECT_DEATH(r.gauge("g", "", {"__name"}), "invalid label name '__name'");
  EXPECT_DEATH(r.gauge("g", "", {"a:b"}), "invalid label name");
  EXPECT_DEATH(r.gauge("g", "", {"le"}), "'le' is reserved");
  EXPECT_DEATH(r.histogram("h", "", {"le"}, {1}), "'le' is reserved");
  EXPECT_DEATH(r.gauge("g", "", {"a", "a"}), "label 'a' declared twice");
  // Valid ones do not abort.
  r.gauge("ns:rule_name_1", "", {"_x", "y2"});
}

TEST_F(RegistryDeathTest, WrongLabelCountAndUnknownLabel) {
  Registry r;
  auto& g = r.gauge("g", "G.", {"a", "b"});
  EXPECT_DEATH(g.with({"x"}), "metric g: with\\(\\) got 1 label values, want 2 \\(a, b\\)");
  EXPECT_DEATH(g.remove({"x", "y", "z"}), "remove\\(\\) got 3");
  EXPECT_DEATH(g.remove_if("c", "x"), "metric g has no label 'c'");
}

TEST_F(RegistryDeathTest, BadBuckets) {
  Registry r;
  EXPECT_DEATH(r.histogram("h", "", {}, {1, 1}), "must increase strictly, but 1 follows 1");
  EXPECT_DEATH(r.histogram("h", "", {}, {2, 1}), "must increase strictly");
  EXPECT_DEATH(r.histogram("h", "", {}, {std::nan("")}), "is not finite");
  EXPECT_DEATH(exponential_buckets(0, 2, 3), "want start > 0");
}

}  // namespace
}  // namespace fp8::metrics
