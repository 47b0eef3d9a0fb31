// fp8-worker: offers this machine's device (one CPU slot group or one GPU) to the fp8
// coordinator and runs the fp8-train ranks it assigns, each as a child process in its
// own process group. See worker_config.h for the flags and coordinator_session.h for the
// protocol.
//
//   fp8-worker                                  cpu, coordinator 127.0.0.1:7070,
//                                               token in ./fp8-worker.token
//   fp8-worker --device cuda:0 --coordinator coord:7070 --address 10.0.0.5:9400
//
// SIGINT / SIGTERM: stop the ranks (SIGTERM, SIGKILL after --stop-grace-default; a
// second signal kills them at once), report their exits, exit 0.
// Exit status: 0 stopped on request; 1 the coordinator refused this worker (bad token,
// incompatible version) or a setup failure; 2 bad command line or no token.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/fp8_worker/coordinator_session.h"
#include "worker/fp8_worker/grpc_clients.h"
#include "worker/fp8_worker/log_forwarder.h"
#include "worker/fp8_worker/rank_supervisor.h"
#include "worker/fp8_worker/trainer_command.h"
#include "worker/fp8_worker/worker_config.h"
#include "worker/fp8_worker/worker_log.h"

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
  const WorkerConfig& config = parsed->config;

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeCoordinatorChannel(config.coordinator, config.coordinator_ca);
  if (!channel.ok()) {
    std::fprintf(stderr, "fp8-worker: %s\n", std::string(channel.status().message()).c_str());
    return 2;
  }
  InstallSignalHandlers();

  const std::chrono::milliseconds deadline(5000);
  LogForwarder forwarder(MakeAppendLogsSender(config.coordinator_ca, deadline), LogForwarder::Options{});
  RankSupervisor ranks(config, &forwarder, CurrentEnvironment());
  CoordinatorSession session(config, *channel, ranks);
  const absl::Status status = session.Run(g_stop_requests);
  if (!status.ok()) return 1;  // the session logged why
  Log("stopped");
  return 0;
}
