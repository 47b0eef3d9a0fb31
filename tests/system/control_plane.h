// The control plane as a user runs it, for the system tests: a real fp8-coordinator and
// real fp8-worker daemons (which run real fp8-train ranks) as child processes on loopback,
// a scratch folder for their state, a corpus and checkpoints, and a JobService client
// holding a token.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8/v1/job_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/cli/subprocess.h"

namespace fp8::system_test {

class ControlPlane {
 public:
  // A scratch folder named after the running test, with a corpus in it.
  ControlPlane();
  ~ControlPlane();

  const std::filesystem::path& dir() const { return dir_; }

  // Serves TLS from now on: a self-signed certificate for 127.0.0.1 (openssl CLI), passed
  // to the coordinator as --tls-cert/--tls-key and to workers and clients as the CA.
  void enable_tls();

  // The daemons started from now on log in this format (--log-format text|json).
  void set_log_format(const std::string& format) { log_format_ = format; }
  // What a child wrote to stderr: "coordinator-1" (its first start), "worker-0".
  std::string stderr_of(const std::string& child) const;

  // Starts the coordinator (again, on the same port and state, after a kill).
  void start_coordinator();
  void kill_coordinator(int sig = SIGKILL);
  // Starts worker number i (its own work folder) offering `device` ("cpu", "cuda:0") and,
  // when memory_gb > 0, that much memory a rank (--memory-gb); returns its index.
  int start_worker(const std::string& device = "cpu", double memory_gb = 0);
  void kill_worker(int index, int sig = SIGKILL);
  // Whether `count` workers are registered (ListWorkers) before `limit` passes.
  bool wait_for_workers(int count, std::chrono::seconds limit) const;
  pid_t worker_pid(int index) const;

  // A job in YAML (paths relative to dir()), resolved like fp8ctl would.
  struct JobOptions {
    std::string name = "sys";
    int world_size = 2;
    int64_t steps = 40;
    int64_t checkpoint_every = 20;
    int max_restarts = 0;
    int priority = 0;
    std::string recipe = "tensorwise";
    std::string device = "cpu";  // resources.device
  };
  v1::JobSpec spec(const JobOptions& o) const;

  // JobService calls with a token (default: the admin token the coordinator wrote).
  std::unique_ptr<v1::JobService::Stub> job_stub() const;
  std::string admin_token() const;
  std::string worker_token() const;
  std::string create_token(const std::string& role, const std::string& name) const;
  grpc::Status submit(const v1::JobSpec& spec, v1::Job* job, const std::string& token = "") const;
  grpc::Status get(const std::string& id, v1::Job* job, const std::string& token = "") const;
  grpc::Status cancel(const std::string& id, v1::Job* job, const std::string& token = "") const;

  // Polls GetJob until `done(job)` holds or `limit` passes; returns the last job seen.
  v1::Job wait_for(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                  std::chrono::seconds limit) const;
  v1::Job wait_for_state(const std::string& id, v1::Job::State state, std::chrono::seconds limit) const;

  // Runs another fp8-coordinator on this state folder (any free port, no metrics) until it
  // exits or `limit` passes.
  cli_test::RunResult run_another_coordinator(std::chrono::milliseconds limit) const;

  // Every child's output so far, for failure messages.
  std::string logs() const;

  int port() const { return port_; }
  // The coordinator's metrics port (--metrics-address 127.0.0.1:0), once started.
  int metrics_port() const { return metrics_port_; }

 private:
  std::filesystem::path dir_;
  bool tls_ = false;
  std::string log_format_ = "text";
  int port_ = 0;
  int metrics_port_ = 0;
  int coordinator_starts_ = 0;
  std::unique_ptr<cli_test::Subprocess> coordinator_;
  std::vector<std::unique_ptr<cli_test::Subprocess>> workers_;
  std::vector<std::filesystem::path> logs_;
};

std::unique_ptr<grpc::ClientContext> with_token(const std::string& token, std::chrono::seconds deadline);

}  // namespace fp8::system_test
