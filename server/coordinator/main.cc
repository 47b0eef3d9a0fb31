// fp8-coordinator: the control plane. Serves JobService (fp8ctl), WorkerService
// (fp8-worker), TrainerService and RendezvousService (fp8-train) on one gRPC port and keeps
// its state in one SQLite file.
//
//   fp8-coordinator [--listen 127.0.0.1:7070] [--state-dir .] ...   serve
//
// Prometheus metrics and a health check are served over HTTP on --metrics-address
// (default 127.0.0.1:9400; "off" serves none): /metrics, /healthz (liveness), /readyz
// (readiness: gRPC serving, tokens in place, database open; deploy/METRICS.md).
//   fp8-coordinator token --role user --name alice [--state-dir .]    print a new token
//
// Every flag has an environment variable (the flag wins); the defaults run on one machine
// with no setup. On its first start (no token in the database) it writes an admin token to
// <state-dir>/fp8-admin.token and a worker token to <state-dir>/fp8-worker.token (mode
// 0600), where fp8ctl and fp8-worker look by default. With --admin-token-file and
// --worker-token-file (a Kubernetes Secret, say) those tokens are accepted instead, and
// nothing is written.
//
// SIGINT / SIGTERM stop it; its state is safe at any instant (kill -9 included): a restart
// carries on with every job, and workers reconnect.
//
// Exit status: 0 stopped by a signal; 2 bad flags; 1 any other failure.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <tuple>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "common/log/log.h"
#include "common/metrics/build_info.h"
#include "common/version/version.h"
#include "common/metrics/grpc_server_metrics.h"
#include "common/metrics/metrics_http_server.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/registry.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/malformed_requests.h"
#include "server/coordinator/services.h"
#include "server/coordinator/state_guard.h"
#include "server/rendezvous/rendezvous_service.h"

namespace {

namespace fs = std::filesystem;
using fp8::server::Role;

struct Flags {
  std::string listen = "127.0.0.1:7070";
  std::string advertise;  // default: the listen address (with the bound port)
  std::string state_dir = ".";
  std::string db;  // default: <state-dir>/fp8-coordinator.db
  std::string port_file;
  std::string metrics_address = "127.0.0.1:9400";
  std::string metrics_port_file;
  int64_t heartbeat_interval_ms = 1000;
  int64_t lost_after_ms = 10000;
  int stop_grace_s = 10;
  double amax_outlier_factor = 8;
  std::vector<std::string> data_roots, checkpoint_roots;
  std::string tls_cert, tls_key;
  std::string admin_token_file, worker_token_file;
  std::string log_format = "text";
  std::string log_level = "info";
  // token subcommand
  std::string role, name;
};

absl::Status install_log(const Flags& f) {
  absl::StatusOr<fp8::log::Format> format = fp8::log::parse_format(f.log_format);
  if (!format.ok()) return absl::InvalidArgumentError(absl::StrCat("--", format.status().message()));
  absl::StatusOr<fp8::log::Level> level = fp8::log::parse_level(f.log_level);
  if (!level.ok()) return absl::InvalidArgumentError(absl::StrCat("--", level.status().message()));
  fp8::log::install({.component = "fp8-coordinator", .format = *format, .min_level = *level});
  return absl::OkStatus();
}

int fail(const std::string& message, int code = 1) {
  fp8::log::error(message);
  return code;
}

std::string read_file(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool write_secret(const fs::path& file, const std::string& text) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const std::string line = text + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  return ::close(fd) == 0 && ok;
}

std::vector<fs::path> roots(const std::vector<std::string>& given) {
  std::vector<fs::path> out;
  for (const std::string& r : given) out.push_back(fs::absolute(r).lexically_normal());
  if (out.empty()) out.push_back(fs::current_path());
  return out;
}

// Accepts the tokens in --admin-token-file / --worker-token-file from now on (stored
// hashed, named "admin" and "workers"); a token already stored must have the same role.
absl::Status accept_token_files(fp8::server::store::CoordinatorStore& store, const Flags& f) {
  for (auto [role, name, file, flag] : {std::tuple{Role::kAdmin, "admin", f.admin_token_file, "--admin-token-file"},
                                        std::tuple{Role::kWorker, "workers", f.worker_token_file,
                                                   "--worker-token-file"}}) {
    if (file.empty()) continue;
    bool ok = false;
    std::string token = read_file(file, &ok);
    if (!ok) return absl::InvalidArgumentError(absl::StrCat(flag, " ", file, ": cannot read it"));
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
    if (token.size() < 32 || token.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", file, ": not a token (one line of at least 32 characters without spaces; "
                       "`fp8-coordinator token` prints one)"));
    }
    const std::string hash = fp8::server::hash_token(token);
    absl::StatusOr<std::optional<fp8::server::store::TokenRecord>> known = store.token(hash);
    if (!known.ok()) return known.status();
    if (known->has_value()) {
      if ((*known)->role != role) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " ", file, ": this token is already a ",
                                                       fp8::server::role_name((*known)->role), " token"));
      }
      continue;
    }
    if (absl::Status s = store.add_token(hash, {name, role}); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// A new admin and worker token on the first start, written where the clients look.
absl::Status bootstrap_tokens(fp8::server::Coordinator& c, const fs::path& state_dir, bool first_start) {
  if (!first_start) return absl::OkStatus();
  for (auto [role, name, file] : {std::tuple{Role::kAdmin, "admin", "fp8-admin.token"},
                                  std::tuple{Role::kWorker, "workers", "fp8-worker.token"}}) {
    absl::StatusOr<std::string> token = c.create_token(role, name);
    if (!token.ok()) return token.status();
    const fs::path path = state_dir / file;
    if (!write_secret(path, *token)) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
    fp8::log::info(absl::StrCat("first start: ", name, " token written to ", path.string()));
  }
  return absl::OkStatus();
}

constexpr int kMaxRequestBytes = 4 << 20;
constexpr size_t kRequestMemoryQuota = size_t{512} << 20;

// Writes `port` to `file` atomically (a reader never sees half a number).
void write_port_file(const std::string& file, int port) {
  if (file.empty()) return;
  const fs::path tmp = file + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::error_code ec;
  fs::rename(tmp, file, ec);
}

int serve(const Flags& f) {
  const fs::path state_dir = fs::absolute(f.state_dir).lexically_normal();
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  const std::string db_path = f.db.empty() ? (state_dir / "fp8-coordinator.db").string() : f.db;
  // Held until the process exits: one state, one coordinator.
  absl::StatusOr<fp8::server::StateLock> state_lock = fp8::server::StateLock::acquire(db_path);
  if (!state_lock.ok()) return fail(std::string(state_lock.status().message()));
  if (absl::Status s = fp8::server::check_database_before_open(state_dir, db_path); !s.ok()) {
    return fail(std::string(s.message()));
  }
  absl::StatusOr<std::unique_ptr<fp8::server::store::CoordinatorStore>> store =
      fp8::server::store::CoordinatorStore::open(db_path);
  if (!store.ok()) return fail(std::string(store.status().message()));
  absl::StatusOr<int64_t> stored_tokens = (*store)->count_tokens();
  if (!stored_tokens.ok()) return fail(std::string(stored_tokens.status().message()));
  if (absl::Status s = fp8::server::check_database_tokens(state_dir, db_path, *stored_tokens); !s.ok()) {
    return fail(std::string(s.message()));
  }
  if (absl::Status s = accept_token_files(**store, f); !s.ok()) return fail(std::string(s.message()), 2);
  absl::StatusOr<int64_t> tokens = (*store)->count_tokens();
  if (!tokens.ok()) return fail(std::string(tokens.status().message()));

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!f.tls_cert.empty() || !f.tls_key.empty()) {
    if (f.tls_cert.empty() || f.tls_key.empty()) return fail("--tls-cert and --tls-key go together", 2);
    bool cert_ok = false, key_ok = false;
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({read_file(f.tls_key, &key_ok), read_file(f.tls_cert, &cert_ok)});
    if (!cert_ok) return fail("cannot read --tls-cert " + f.tls_cert, 2);
    if (!key_ok) return fail("cannot read --tls-key " + f.tls_key, 2);
    creds = grpc::SslServerCredentials(ssl);
  }

  fp8::server::RendezvousStore rendezvous;
  fp8::server::CoordinatorOptions options;
  options.heartbeat_interval = absl::Milliseconds(f.heartbeat_interval_ms);
  options.lost_after = absl::Milliseconds(f.lost_after_ms);
  options.stop_grace_seconds = f.stop_grace_s;
  options.amax_outlier_factor = f.amax_outlier_factor;
  options.roots.data = roots(f.data_roots);
  options.roots.checkpoint = roots(f.checkpoint_roots);

  // Trainers get the advertised address in StartRank. With --listen HOST:0 the port is
  // known only once the server is bound, so the coordinator learns it then.
  options.advertise_address = f.advertise.empty() ? f.listen : f.advertise;
  absl::StatusOr<std::unique_ptr<fp8::server::Coordinator>> made =
      fp8::server::Coordinator::create(std::move(*store), rendezvous, options);
  if (!made.ok()) return fail(std::string(made.status().message()));
  fp8::server::Coordinator& c = **made;

  fp8::metrics::Registry registry;
  fp8::metrics::register_process_metrics(registry);
  fp8::metrics::register_build_info(registry, "coordinator", fp8::kVersion);
  fp8::server::CoordinatorMetrics coordinator_metrics(registry);
  c.set_metrics(&coordinator_metrics);
  registry.add_collector([&c, &coordinator_metrics] { coordinator_metrics.set_cluster(c.cluster()); });
  // /readyz: 503 until the gRPC server is serving and the first-start tokens exist (set
  // below), and again once stopping; while serving, as /healthz (the store answers).
  std::atomic<bool> serving{false};
  auto ready = [&c, &serving]() -> absl::Status {
    if (!serving.load()) return absl::UnavailableError("not serving gRPC (starting or stopping)");
    return c.health();
  };
  std::unique_ptr<fp8::metrics::MetricsHttpServer> metrics_server;
  if (f.metrics_address != "off") {
    absl::StatusOr<std::unique_ptr<fp8::metrics::MetricsHttpServer>> started = fp8::metrics::MetricsHttpServer::start(
        f.metrics_address, registry, [&c] { return c.health(); }, ready);
    if (!started.ok()) return fail(absl::StrCat("--metrics-address: ", started.status().message()), 2);
    metrics_server = std::move(*started);
  }
  fp8::server::JobServiceImpl jobs(c);
  fp8::server::WorkerServiceImpl workers(c);
  fp8::server::TrainerServiceImpl trainers(c);
  fp8::server::RendezvousServiceImpl rendezvous_service(
      rendezvous, [&c](grpc::ServerContext& ctx, std::string_view ns) -> grpc::Status {
        absl::StatusOr<fp8::server::Principal> who = fp8::server::caller(c, ctx);
        if (!who.ok()) return fp8::server::to_grpc(who.status());
        return fp8::server::to_grpc(c.authorize_rendezvous(*who, ns));
      });

  grpc::ServerBuilder builder;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // First: the metrics interceptor then counts a malformed request by the code it gets.
  interceptors.push_back(fp8::server::make_malformed_request_interceptor_factory());
  interceptors.push_back(fp8::metrics::make_grpc_server_metrics_interceptor_factory(registry));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  int port = 0;
  builder.AddListeningPort(f.listen, creds, &port);
  // Every request's fields are bounded (limits.proto) well inside this, and a body is
  // received and parsed before its token can be checked: the limit and the quota bound
  // what unauthenticated callers can make the coordinator hold.
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  grpc::ResourceQuota quota("fp8-coordinator");
  quota.Resize(kRequestMemoryQuota);
  builder.SetResourceQuota(quota);
  builder.RegisterService(&jobs);
  builder.RegisterService(&workers);
  builder.RegisterService(&trainers);
  builder.RegisterService(&rendezvous_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return fail("cannot listen on " + f.listen + " (in use, or not an address of this host)");
  if (f.advertise.empty()) {
    const std::string host = f.listen.substr(0, f.listen.rfind(':'));
    c.set_advertise_address(absl::StrCat(host, ":", port));
  }
  if (absl::Status s = bootstrap_tokens(c, state_dir, *tokens == 0); !s.ok()) {
    return fail(std::string(s.message()));
  }
  serving = true;
  // The metrics port first: a reader of the gRPC port file may expect both.
  if (metrics_server) write_port_file(f.metrics_port_file, metrics_server->port());
  write_port_file(f.port_file, port);
  fp8::log::info(absl::StrCat("serving on ", f.listen, " (port ", port, "), state in ", db_path));
  if (metrics_server) {
    const std::string host = f.metrics_address.substr(0, f.metrics_address.rfind(':'));
    fp8::log::info(absl::StrCat("metrics at http://", host, ":", metrics_server->port(), "/metrics"));
  }
  c.start_ticking();

  // Wait for SIGINT / SIGTERM (blocked in every thread, taken here).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  int sig = 0;
  sigwait(&signals, &sig);
  serving = false;
  fp8::log::info(absl::StrCat("stopping (signal ", sig, ")"));
  c.shutdown();
  rendezvous.shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (metrics_server) metrics_server->stop();
  c.set_metrics(nullptr);
  return 0;
}

int create_token_command(const Flags& f) {
  absl::StatusOr<Role> role = fp8::server::parse_role(f.role);
  if (!role.ok()) return fail(std::string(role.status().message()), 2);
  const fs::path state_dir = fs::absolute(f.state_dir).lexically_normal();
  const std::string db_path = f.db.empty() ? (state_dir / "fp8-coordinator.db").string() : f.db;
  absl::StatusOr<std::unique_ptr<fp8::server::store::CoordinatorStore>> store =
      fp8::server::store::CoordinatorStore::open(db_path);
  if (!store.ok()) return fail(std::string(store.status().message()));
  if (absl::Status s = fp8::server::check_owner_name(f.name, "--name"); !s.ok()) return fail(std::string(s.message()), 2);
  const std::string token = fp8::server::new_token(*role);
  if (absl::Status s = (*store)->add_token(fp8::server::hash_token(token), {f.name, *role}); !s.ok()) {
    return fail(std::string(s.message()));
  }
  std::printf("%s\n", token.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Signals go to the waiting main thread only: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Debian's Abseil checks lock order on every Mutex lock by default, keeping a global
  // graph under a global lock that every request thread then queues on (bench/RESULTS.md).
  // The tests, which do not run this main, keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  Flags f;
  CLI::App app{"fp8-coordinator: schedules fp8 training jobs onto fp8-worker daemons"};
  app.add_option("--listen", f.listen, "host:port to serve gRPC on")->envname("FP8_COORDINATOR_LISTEN")
      ->capture_default_str();
  app.add_option("--advertise", f.advertise, "host:port trainers reach this coordinator at (default: --listen)")
      ->envname("FP8_COORDINATOR_ADVERTISE");
  app.add_option("--state-dir", f.state_dir, "folder of the database and first-start tokens")
      ->envname("FP8_STATE_DIR")->capture_default_str();
  app.add_option("--db", f.db, "SQLite file (default <state-dir>/fp8-coordinator.db)")->envname("FP8_COORDINATOR_DB");
  app.add_option("--port-file", f.port_file, "write the bound port here (for --listen ...:0)");
  app.add_option("--metrics-address", f.metrics_address,
                 "host:port to serve /metrics, /healthz and /readyz on (port 0: any free port; off: none)")
      ->envname("FP8_COORDINATOR_METRICS_ADDRESS")->capture_default_str();
  app.add_option("--metrics-port-file", f.metrics_port_file, "write the bound metrics port here");
  app.add_option("--heartbeat-interval-ms", f.heartbeat_interval_ms, "how often workers heartbeat")
      ->envname("FP8_HEARTBEAT_INTERVAL_MS")->check(CLI::Range(int64_t{10}, int64_t{600000}))->capture_default_str();
  app.add_option("--lost-after-ms", f.lost_after_ms, "a worker silent this long is lost")
      ->envname("FP8_LOST_AFTER_MS")->check(CLI::Range(int64_t{20}, int64_t{3600000}))->capture_default_str();
  app.add_option("--stop-grace-s", f.stop_grace_s, "SIGTERM to SIGKILL for stopped ranks")
      ->envname("FP8_STOP_GRACE_S")->check(CLI::Range(0, 3600))->capture_default_str();
  app.add_option("--amax-outlier-factor", f.amax_outlier_factor,
                 "an AMAX_OUTLIER event when one rank's cast amax exceeds every other rank's by this factor "
                 "(<= 1: never)")
      ->envname("FP8_AMAX_OUTLIER_FACTOR")->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--data-root", f.data_roots, "data.path must be under one of these (default: the working folder)")
      ->envname("FP8_DATA_ROOTS")->delimiter(':');
  app.add_option("--checkpoint-root", f.checkpoint_roots,
                 "checkpoint.dir must be under one of these (default: the working folder)")
      ->envname("FP8_CHECKPOINT_ROOTS")->delimiter(':');
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate chain: serve TLS")->envname("FP8_TLS_CERT");
  app.add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert")->envname("FP8_TLS_KEY");
  app.add_option("--admin-token-file", f.admin_token_file,
                 "accept the admin token in this file (instead of writing one on the first start)")
      ->envname("FP8_COORDINATOR_ADMIN_TOKEN_FILE");
  app.add_option("--worker-token-file", f.worker_token_file,
                 "accept the worker token in this file (instead of writing one on the first start)")
      ->envname("FP8_COORDINATOR_WORKER_TOKEN_FILE");
  app.add_option("--log-format", f.log_format, "text or json (one object per line, for log collectors)")
      ->envname("FP8_LOG_FORMAT")->capture_default_str();
  app.add_option("--log-level", f.log_level, "debug, info, warning or error: lines below it are dropped")
      ->envname("FP8_LOG_LEVEL")->capture_default_str();
  CLI::App* token = app.add_subcommand("token", "create a token (printed once; only its hash is kept)");
  token->fallthrough();  // --state-dir / --db may follow the subcommand
  token->add_option("--role", f.role, "admin, user or worker")->required();
  token->add_option("--name", f.name, "user name (a user's jobs are those it owns) or worker name")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (absl::Status s = install_log(f); !s.ok()) {
    std::fprintf(stderr, "fp8-coordinator: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // protobuf's own messages go to the log, with request parse errors only counted.
  fp8::server::quiet_request_parse_errors();
  if (f.lost_after_ms <= f.heartbeat_interval_ms) {
    return fail("--lost-after-ms must be longer than --heartbeat-interval-ms", 2);
  }
  if (token->parsed()) return create_token_command(f);
  return serve(f);
}
