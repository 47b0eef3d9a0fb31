// fp8-worker: offers this machine's device (one CPU slot group or one GPU) to the fp8
// coordinator and runs the fp8-train ranks it assigns, each as a child process in its
// own process group. See worker_config.h for the flags and coordinator_session.h for the
// protocol.
//
//   fp8-worker                                  cpu, coordinator 127.0.0.1:7070,
//                                               token in ./fp8-worker.token
//   fp8-worker --device cuda:0 --coordinator coord:7070 --address 10.0.0.5:9401
//
// --address is where Prometheus scrapes it (/metrics, /healthz; deploy/METRICS.md) and
// what it registers with; port 0 binds any free port and registers that one.
// SIGINT / SIGTERM: stop the ranks (SIGTERM, SIGKILL after --stop-grace-default; a
// second signal kills them at once), report their exits, exit 0.
// Exit status: 0 stopped on request; 1 the coordinator refused this worker (bad token,
// incompatible version) or a setup failure; 2 bad command line or no token.
#include <signal.h>

#include <atomic>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/build_info.h"
#include "common/metrics/metrics_http_server.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "worker/fp8_worker/coordinator_session.h"
#include "worker/fp8_worker/grpc_clients.h"
#include "worker/fp8_worker/log_forwarder.h"
#include "worker/fp8_worker/rank_supervisor.h"
#include "worker/fp8_worker/trainer_command.h"
#include "worker/fp8_worker/worker_config.h"
#include "worker/fp8_worker/worker_log.h"
#include "worker/fp8_worker/worker_metrics.h"

namespace {

std::atomic<int> g_stop_requests{0};

void OnStopSignal(int) { g_stop_requests.fetch_add(1); }

void InstallSignalHandlers() {
  struct sigaction sa{};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A write to a closed pipe or socket is an error to handle, not a reason to die.
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fp8::worker;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<ParsedCommandLine> parsed = ParseWorkerConfig(args, ProcessEnv());
  if (!parsed.ok()) {
    std::fprintf(stderr, "fp8-worker: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (parsed->print_and_exit) {
    std::fputs(parsed->print_and_exit->c_str(), stdout);
    return 0;
  }
  WorkerConfig& config = parsed->config;

  fp8::metrics::Registry registry;
  fp8::metrics::RegisterProcessMetrics(registry);
  fp8::metrics::RegisterBuildInfo(registry, "worker", kWorkerVersion);
  WorkerMetrics worker_metrics(registry, config.device_name);
  absl::StatusOr<std::unique_ptr<fp8::metrics::MetricsHttpServer>> metrics_server =
      fp8::metrics::MetricsHttpServer::Start(config.metrics_address, registry, [] { return absl::OkStatus(); });
  if (!metrics_server.ok()) {
    std::fprintf(stderr, "fp8-worker: --metrics-address: %s\n",
                 std::string(metrics_server.status().message()).c_str());
    return 2;
  }
  // An --address with port 0 registers the port actually bound, so that the coordinator
  // lists where to scrape.
  if (absl::EndsWith(config.address, ":0")) {
    config.address = absl::StrCat(config.address.substr(0, config.address.size() - 1), (*metrics_server)->port());
  }
  Log(absl::StrCat("metrics at http://", config.address, "/metrics"));

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeCoordinatorChannel(config.coordinator, config.coordinator_ca);
  if (!channel.ok()) {
    std::fprintf(stderr, "fp8-worker: %s\n", std::string(channel.status().message()).c_str());
    return 2;
  }
  InstallSignalHandlers();

  const std::chrono::milliseconds deadline(5000);
  LogForwarder forwarder(MakeAppendLogsSender(config.coordinator_ca, deadline), LogForwarder::Options{});
  RankSupervisor ranks(config, &forwarder, CurrentEnvironment());
  SessionOptions session_options;
  session_options.metrics = &worker_metrics;
  CoordinatorSession session(config, *channel, ranks, session_options);
  const absl::Status status = session.Run(g_stop_requests);
  if (!status.ok()) return 1;  // the session logged why
  Log("stopped");
  return 0;
}
