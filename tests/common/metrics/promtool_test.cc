// `promtool check metrics` on the exposition of a registry holding every kind of family:
// Prometheus' own parser and linter are the judge of the text format. Any output at all
// (a lint warning such as a counter without _total, or a missing HELP) fails the test.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "common/metrics/build_info.h"
#include "common/metrics/grpc_server_metrics.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"

namespace fp8::metrics {
namespace {

// Output (stdout and stderr) and exit status of a shell command.
struct ShellResult {
  std::string output;
  int status = -1;
};
ShellResult run_shell(const std::string& command) {
  ShellResult run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) run.output.append(buf, n);
  run.status = pclose(pipe);
  return run;
}

void populate(Registry& r) {
  register_process_metrics(r);
  register_build_info(r, "coordinator", "0.1.0");
  (void)make_grpc_server_metrics_interceptor_factory(r);
  r.counter("grpc_server_started_total", "", {"grpc_type", "grpc_service", "grpc_method"})
      .with({"unary", "fp8.v1.JobService", "Submit"})
      .inc(12);
  r.counter("grpc_server_handled_total", "", {"grpc_type", "grpc_service", "grpc_method", "grpc_code"})
      .with({"unary", "fp8.v1.JobService", "Submit", "OK"})
      .inc(12);
  r.histogram("grpc_server_handling_seconds", "", {"grpc_type", "grpc_service", "grpc_method"},
              default_latency_buckets())
      .with({"unary", "fp8.v1.JobService", "Submit"})
      .observe(0.004);

  auto& info = r.gauge("fp8_job_info", "One series per job (always 1).",
                       {"job_id", "job_name", "user"}, /*max_series=*/2);
  info.with({"job-1", "llama \"tiny\"", "C:\\users\\bob"}).set(1);
  info.with({"job-2", "two\nlines", ""}).set(1);
  info.with({"job-3", "over the cap", "x"}).set(1);  // dropped, counted
  r.gauge("fp8_job_loss", "Training loss at the last report.", {"job_id"})
      .with({"job-1"})
      .set(std::nan(""));
  r.gauge("fp8_cast_range_use", "amax*scale / fp8 max.", {"job_id"}).with({"job-1"}).set(1.5e-9);
  r.gauge("fp8_job_grad_norm", "Gradient norm.", {"job_id"})
      .with({"job-1"})
      .set(std::numeric_limits<double>::infinity());
  r.counter("fp8_job_tokens_total", "Tokens trained.", {"job_id"}).with({"job-1"}).inc(1e12);
  r.counter("fp8_coordinator_heartbeats_total", "Worker heartbeats received.", {});
  auto& wait = r.histogram("fp8_scheduler_queue_wait_seconds",
                           "Submit to start of an attempt.\nSecond line \\ backslash.",
                           {"device_kind"}, exponential_buckets(0.1, 2, 8));
  wait.with({"cpu"}).observe(0.3);
  wait.with({"h100"}).observe(100);
  r.histogram("fp8_worker_heartbeat_seconds", "Heartbeat round trip.", {},
              default_latency_buckets())
      .with()
      .observe(0.002);
}

TEST(Promtool, ExpositionPassesCheckMetrics) {
  const std::string promtool = FP8_PROMTOOL;
  ASSERT_FALSE(promtool.empty())
      << "promtool was not found when CMake configured this build; install it "
         "(scripts/bootstrap.sh: apt-get install prometheus) and re-run cmake";
  ASSERT_TRUE(std::filesystem::exists(promtool)) << promtool << " does not exist";

  Registry registry;
  populate(registry);
  const std::string text = registry.expose();
  ASSERT_NE(text.find("fp8_metrics_series_dropped_total{family=\"fp8_job_info\"} 1\n"),
            std::string::npos)
      << text;

  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("fp8_metrics_promtool_" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream out(file);
    out << text;
  }
  const ShellResult run = run_shell("'" + promtool + "' check metrics < '" + file.string() + "'");
  std::filesystem::remove(file);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0)
      << "promtool exit status " << run.status << "\n" << run.output << "\non:\n" << text;
  EXPECT_EQ(run.output, "") << "promtool complained about:\n" << text;
}

// The check itself must catch mistakes, or the test above proves nothing.
TEST(Promtool, FlagsABrokenExposition) {
  const std::string promtool = FP8_PROMTOOL;
  ASSERT_FALSE(promtool.empty()) << "promtool was not found at configure time";
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("fp8_metrics_promtool_bad_" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream out(file);
    out << "# HELP requests Requests.\n# TYPE requests counter\nrequests 1\n";  // no _total
  }
  const ShellResult run = run_shell("'" + promtool + "' check metrics < '" + file.string() + "'");
  std::filesystem::remove(file);
  EXPECT_NE(run.output, "");
}

}  // namespace
}  // namespace fp8::metrics
