// fp8-worker: offers this machine's devices (one CPU slot group, or one or more GPUs) to
// the fp8 coordinator and runs the fp8-train ranks it assigns, each as a child process in
// its own process group. See worker_config.h for the flags and coordinator_session.h for
// the protocol.
//
//   fp8-worker                                  cpu, coordinator 127.0.0.1:7070,
//                                               token in ./fp8-worker.token
//   fp8-worker --device cuda:0 --coordinator coord:7070 --address 10.0.0.5:9401
//   fp8-worker --device cuda:all --coordinator coord:7070 --address 10.0.0.5:9401
//
// Each GPU is a slot: a CoordinatorSession of its own, on its own thread, registering as
// a worker of its own (its own worker id, device_name cuda:N; the coordinator places one
// rank per worker) with its own RankSupervisor and work dir (worker_config.h,
// SlotConfigs). The slots share the stop counter, the metrics registry and its HTTP
// server (their series labelled by device), the log forwarder (thread-safe, keyed by
// job/attempt/rank, which no two ranks share) and the channel to the coordinator.
//
// --address is where Prometheus scrapes it (/metrics, /healthz, and /readyz: 200 once
// every slot is registered with the coordinator; deploy/METRICS.md) and
// what every slot registers with; port 0 binds any free port and registers that one.
// SIGINT / SIGTERM: every slot stops its ranks (SIGTERM, SIGKILL after
// --stop-grace-default; a second signal kills them at once), reports their exits, and
// the daemon exits 0.
// Exit status: 0 stopped on request; 1 the coordinator refused a slot (bad token,
// incompatible version; the other slots are then stopped too) or a setup failure;
// 2 bad command line or no token (or cuda:all without a GPU).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/metrics/build_info.h"
#include "common/metrics/metrics_http_server.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "worker/fp8_worker/coordinator_session.h"
#include "worker/fp8_worker/cuda_device_memory.h"
#include "worker/fp8_worker/grpc_clients.h"
#include "worker/fp8_worker/log_forwarder.h"
#include "worker/fp8_worker/rank_supervisor.h"
#include "worker/fp8_worker/trainer_command.h"
#include "worker/fp8_worker/worker_config.h"
#include "worker/fp8_worker/worker_metrics.h"

namespace {

std::atomic<int> g_stop_requests{0};

void on_stop_signal(int) { g_stop_requests.fetch_add(1); }

// One offered device: its session and the ranks it runs (see the top of this file).
struct Slot {
  Slot(const fp8::worker::WorkerConfig& config, std::shared_ptr<grpc::Channel> channel,
       fp8::worker::LogForwarder& forwarder, std::vector<std::string> environment,
       fp8::worker::WorkerMetricFamilies& families)
      : metrics(families, config.device_name),
        ranks(config, &forwarder, std::move(environment)),
        session(config, std::move(channel), ranks, options(&metrics)) {}

  static fp8::worker::SessionOptions options(fp8::worker::WorkerMetrics* metrics) {
    fp8::worker::SessionOptions options;
    options.metrics = metrics;
    return options;
  }

  fp8::worker::WorkerMetrics metrics;
  fp8::worker::RankSupervisor ranks;
  fp8::worker::CoordinatorSession session;
};

void install_signal_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
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
  absl::StatusOr<ParsedCommandLine> parsed = parse_worker_config(args, process_env());
  if (!parsed.ok()) {
    std::fprintf(stderr, "fp8-worker: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (parsed->print_and_exit) {
    std::fputs(parsed->print_and_exit->c_str(), stdout);
    return 0;
  }
  WorkerConfig& config = parsed->config;
  fp8::log::install({.component = "fp8-worker", .format = config.log_format, .min_level = config.log_level});

  fp8::metrics::Registry registry;
  fp8::metrics::register_process_metrics(registry);
  fp8::metrics::register_build_info(registry, "worker", kWorkerVersion);
  WorkerMetricFamilies metric_families(registry);
  // Ready once every slot is registered and heartbeating, read from fp8_worker_connected:
  // the gauge is thread-safe, a session's own state is its thread's alone.
  std::vector<std::string> devices;
  for (const WorkerConfig& slot_config : slot_configs(config)) devices.push_back(slot_config.device_name);
  auto ready = [&metric_families, devices]() -> absl::Status {
    for (const std::string& device : devices) {
      if (metric_families.connected.with({device}).value() != 1) {
        return absl::UnavailableError(absl::StrCat(device, ": not registered with (or not reaching) the coordinator"));
      }
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<fp8::metrics::MetricsHttpServer>> metrics_server =
      fp8::metrics::MetricsHttpServer::start(config.metrics_address, registry, [] { return absl::OkStatus(); }, ready);
  if (!metrics_server.ok()) {
    fp8::log::error(absl::StrCat("--metrics-address: ", metrics_server.status().message()));
    return 2;
  }
  // An --address with port 0 registers the port actually bound, so that the coordinator
  // lists where to scrape.
  if (absl::EndsWith(config.address, ":0")) {
    config.address = absl::StrCat(config.address.substr(0, config.address.size() - 1), (*metrics_server)->port());
  }
  fp8::log::info(absl::StrCat("metrics at http://", config.address, "/metrics"));

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = make_coordinator_channel(config.coordinator, config.coordinator_ca);
  if (!channel.ok()) {
    fp8::log::error(channel.status().message());
    return 2;
  }
  install_signal_handlers();

  const std::chrono::milliseconds deadline(5000);
  // Declared before the slots: their ranks' output readers write into it until the
  // supervisors are gone.
  LogForwarder forwarder(make_append_logs_sender(config.coordinator_ca, deadline), LogForwarder::Options{});
  const std::vector<std::string> environment = current_environment();
  // After --address took its bound port: each slot registers it.
  std::vector<WorkerConfig> slot_list = slot_configs(config);
  for (const std::string& line : offer_gpu_memory(slot_list, cuda_device_memory_gb)) fp8::log::warn(line);
  std::vector<std::unique_ptr<Slot>> slots;
  for (const WorkerConfig& slot_config : slot_list) {
    slots.push_back(std::make_unique<Slot>(slot_config, *channel, forwarder, environment, metric_families));
  }
  if (slots.size() > 1) fp8::log::info(absl::StrCat(slots.size(), " slots: ", config.device_name));

  std::atomic<bool> any_failed{false};
  std::vector<std::thread> threads;
  for (auto& slot : slots) {
    threads.emplace_back([&slot, &any_failed] {
      if (slot->session.run(g_stop_requests).ok()) return;  // a failure was logged by the session
      any_failed = true;
      // Stop the other slots as a first stop request would (a signal after it is then a
      // second one, which kills the ranks at once).
      int none = 0;
      g_stop_requests.compare_exchange_strong(none, 1);
    });
  }
  for (std::thread& t : threads) t.join();
  if (any_failed) return 1;
  fp8::log::info("stopped");
  return 0;
}
