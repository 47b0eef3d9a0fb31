#include "tests/system/control_plane.h"

#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/jobspec/loader.h"
#include "gtest/gtest.h"
#include "tests/cli/synthetic_text.h"

#ifndef FP8_COORDINATOR_BINARY
#error "FP8_COORDINATOR_BINARY, FP8_WORKER_BINARY and FP8_TRAIN_BINARY must name the executables"
#endif

namespace fp8::system_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The executables: where the build put them, or, with FP8_TEST_BIN_DIR set, in that folder
// (the GPU machine runs these tests from a bundle, scripts/gpu/bundle.sh, somewhere else).
std::string binary(const char* built) {
  const char* dir = std::getenv("FP8_TEST_BIN_DIR");
  if (dir == nullptr || *dir == '\0') return built;
  return (fs::path(dir) / fs::path(built).filename()).string();
}

const std::map<std::string, std::string>& child_env() {
  static const std::map<std::string, std::string> env = {{"FP8_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  return env;
}

}  // namespace

std::unique_ptr<grpc::ClientContext> with_token(const std::string& token, std::chrono::seconds deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  return ctx;
}

ControlPlane::ControlPlane() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = fs::temp_directory_path() / ("fp8_system_" + std::to_string(::getpid()) + "_" + info->name());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  std::ofstream(dir_ / "corpus.txt", std::ios::binary) << cli_test::synthetic_text(200 * 1024);
}

ControlPlane::~ControlPlane() {
  for (auto& w : workers_) {
    if (w) w->signal(SIGTERM);
  }
  for (auto& w : workers_) {
    if (w) w->wait(milliseconds(10'000));
  }
  if (coordinator_) {
    coordinator_->signal(SIGTERM);
    coordinator_->wait(milliseconds(10'000));
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(dir_);
}

void ControlPlane::enable_tls() {
  const cli_test::RunResult r = cli_test::run(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
       "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", (dir_ / "tls.key").string(), "-out",
       (dir_ / "tls.crt").string()},
      {}, dir_ / "openssl.out", dir_ / "openssl.err", milliseconds(60'000));
  ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << r.err;
  tls_ = true;
}

void ControlPlane::start_coordinator() {
  const fs::path port_file = dir_ / "coordinator.port";
  const fs::path metrics_port_file = dir_ / "coordinator.metrics-port";
  fs::remove(port_file);
  fs::remove(metrics_port_file);
  const std::string listen = "127.0.0.1:" + std::to_string(port_);  // 0 the first time
  const int n = ++coordinator_starts_;
  const fs::path out = dir_ / ("coordinator-" + std::to_string(n) + ".out");
  const fs::path err = dir_ / ("coordinator-" + std::to_string(n) + ".err");
  logs_.push_back(out);
  logs_.push_back(err);
  std::vector<std::string> argv = {binary(FP8_COORDINATOR_BINARY), "--listen", listen, "--port-file", port_file.string(),
                                   "--state-dir", dir_.string(), "--heartbeat-interval-ms", "200", "--lost-after-ms",
                                   "4000", "--stop-grace-s", "3", "--data-root", dir_.string(), "--checkpoint-root",
                                   dir_.string(), "--metrics-address", "127.0.0.1:0", "--metrics-port-file",
                                   metrics_port_file.string()};
  if (tls_) argv.insert(argv.end(), {"--tls-cert", (dir_ / "tls.crt").string(), "--tls-key", (dir_ / "tls.key").string()});
  argv.insert(argv.end(), {"--log-format", log_format_});
  coordinator_ = std::make_unique<cli_test::Subprocess>(argv, child_env(), out, err);
  ASSERT_TRUE(coordinator_->started()) << coordinator_->start_error();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(port_file)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the coordinator did not start\n" << logs();
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::ifstream(port_file) >> port_;
  ASSERT_GT(port_, 0);
  std::ifstream(metrics_port_file) >> metrics_port_;  // written before the gRPC port file
  ASSERT_GT(metrics_port_, 0);
}

std::string ControlPlane::stderr_of(const std::string& child) const {
  std::ifstream in(dir_ / (child + ".err"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

cli_test::RunResult ControlPlane::run_another_coordinator(std::chrono::milliseconds limit) const {
  return cli_test::run({binary(FP8_COORDINATOR_BINARY), "--listen", "127.0.0.1:0", "--state-dir", dir_.string(),
                        "--metrics-address", "off", "--data-root", dir_.string(), "--checkpoint-root", dir_.string()},
                       child_env(), dir_ / "another-coordinator.out", dir_ / "another-coordinator.err", limit);
}

void ControlPlane::kill_coordinator(int sig) {
  coordinator_->signal(sig);
  coordinator_->wait(milliseconds(10'000));
}

int ControlPlane::start_worker(const std::string& device, double memory_gb) {
  const int index = static_cast<int>(workers_.size());
  const fs::path out = dir_ / ("worker-" + std::to_string(index) + ".out");
  const fs::path err = dir_ / ("worker-" + std::to_string(index) + ".err");
  logs_.push_back(out);
  logs_.push_back(err);
  std::vector<std::string> argv = {binary(FP8_WORKER_BINARY), "--coordinator", "127.0.0.1:" + std::to_string(port_),
                                   "--token-file", (dir_ / "fp8-worker.token").string(), "--work-dir",
                                   (dir_ / ("worker-" + std::to_string(index))).string(), "--trainer",
                                   binary(FP8_TRAIN_BINARY), "--cpus", "1", "--device", device};
  if (tls_) argv.insert(argv.end(), {"--coordinator-ca", (dir_ / "tls.crt").string()});
  argv.insert(argv.end(), {"--log-format", log_format_});
  if (memory_gb > 0) argv.insert(argv.end(), {"--memory-gb", std::to_string(memory_gb)});
  workers_.push_back(std::make_unique<cli_test::Subprocess>(argv, child_env(), out, err));
  EXPECT_TRUE(workers_.back()->started()) << workers_.back()->start_error();
  return index;
}

void ControlPlane::kill_worker(int index, int sig) {
  workers_.at(index)->signal(sig);
  workers_.at(index)->wait(milliseconds(10'000));
}

pid_t ControlPlane::worker_pid(int index) const { return workers_.at(index)->pid(); }

bool ControlPlane::wait_for_workers(int count, std::chrono::seconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    v1::ListWorkersResponse response;
    auto ctx = with_token(admin_token(), std::chrono::seconds(10));
    if (job_stub()->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &response).ok() &&
        response.workers_size() >= count) {
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

v1::JobSpec ControlPlane::spec(const JobOptions& o) const {
  std::ostringstream y;
  y << "name: " << o.name << "\npriority: " << o.priority
    << "\nmodel: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\n"
       "data: {path: corpus.txt, seq_len: 32, val_fraction: 0.05}\n"
       "train: {steps: "
    << o.steps
    << ", batch_size: 4, lr: 3e-3, warmup_steps: 5, log_every: 5, eval_every: 0}\n"
       "fp8: {recipe: "
    << o.recipe << "}\ncheckpoint: {dir: ckpt/" << o.name << ", every: " << o.checkpoint_every
    << ", keep: 2}\n"
       "resources: {device: "
    << o.device << ", world_size: "
    << o.world_size << ", cpus_per_rank: 1}\nrestarts: {max_restarts: " << o.max_restarts
    << ", backoff_seconds: 0}\n";
  const fs::path file = dir_ / (o.name + ".yaml");
  std::ofstream(file) << y.str();
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(file.string());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

std::string ControlPlane::admin_token() const {
  std::ifstream in(dir_ / "fp8-admin.token");
  std::stringstream s;
  s << in.rdbuf();
  return trim(s.str());
}

std::string ControlPlane::worker_token() const {
  std::ifstream in(dir_ / "fp8-worker.token");
  std::stringstream s;
  s << in.rdbuf();
  return trim(s.str());
}

std::string ControlPlane::create_token(const std::string& role, const std::string& name) const {
  const cli_test::RunResult r =
      cli_test::run({binary(FP8_COORDINATOR_BINARY), "token", "--role", role, "--name", name, "--state-dir", dir_.string()},
                    {}, dir_ / "token.out", dir_ / "token.err", milliseconds(30'000));
  EXPECT_TRUE(r.exit.exited && r.exit.code == 0) << r.err;
  return trim(r.out);
}

std::unique_ptr<v1::JobService::Stub> ControlPlane::job_stub() const {
  const std::string address = "127.0.0.1:" + std::to_string(port_);
  if (!tls_) return v1::JobService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = cli_test::read_file(dir_ / "tls.crt");
  return v1::JobService::NewStub(grpc::CreateChannel(address, grpc::SslCredentials(ssl)));
}

grpc::Status ControlPlane::submit(const v1::JobSpec& spec, v1::Job* job, const std::string& token) const {
  v1::SubmitJobRequest r;
  *r.mutable_spec() = spec;
  auto ctx = with_token(token.empty() ? admin_token() : token, std::chrono::seconds(10));
  return job_stub()->Submit(ctx.get(), r, job);
}

grpc::Status ControlPlane::get(const std::string& id, v1::Job* job, const std::string& token) const {
  v1::GetJobRequest r;
  r.set_job_id(id);
  auto ctx = with_token(token.empty() ? admin_token() : token, std::chrono::seconds(10));
  return job_stub()->GetJob(ctx.get(), r, job);
}

grpc::Status ControlPlane::cancel(const std::string& id, v1::Job* job, const std::string& token) const {
  v1::CancelJobRequest r;
  r.set_job_id(id);
  auto ctx = with_token(token.empty() ? admin_token() : token, std::chrono::seconds(10));
  return job_stub()->CancelJob(ctx.get(), r, job);
}

v1::Job ControlPlane::wait_for(const std::string& id, const std::function<bool(const v1::Job&)>& done,
                              std::chrono::seconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  v1::Job job;
  while (std::chrono::steady_clock::now() < deadline) {
    v1::Job got;
    // The coordinator may be restarting: keep polling through errors.
    if (get(id, &got).ok()) {
      job = got;
      if (done(job)) return job;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return job;
}

v1::Job ControlPlane::wait_for_state(const std::string& id, v1::Job::State state, std::chrono::seconds limit) const {
  return wait_for(id, [state](const v1::Job& j) { return j.state() == state; }, limit);
}

std::string ControlPlane::logs() const {
  std::string out;
  for (const fs::path& p : logs_) {
    out += "---- " + p.filename().string() + "\n" + cli_test::read_file(p);
  }
  return out;
}

}  // namespace fp8::system_test
