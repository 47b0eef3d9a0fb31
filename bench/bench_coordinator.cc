// bench_coordinator: how much control-plane traffic one fp8-coordinator sustains.
//
// In one process: a real coordinator wired like server/coordinator/main.cc (SQLite in a temp
// folder, RendezvousStore, Coordinator, Job/Worker/Trainer services on 127.0.0.1:0), and
// beside it a bare gRPC echo server (WorkerService.Heartbeat and TrainerService.ReportProgress
// that answer OK at once, no state) on another port. N simulated workers register, N jobs of
// world_size 1 are submitted so that every worker gets a rank, each worker takes its StartRank
// from a heartbeat reply, and its simulated trainer reports with that trainer token. Then both
// servers get the same load shape in turn:
//
//   paced   every worker heartbeats once a second and every trainer reports once a second
//           (phases spread over the second; a call never overlaps its predecessor)
//   closed  heartbeats as above; every trainer sends its next ReportProgress as soon as the
//           previous one returns (N reports in flight: the server's capacity)
//
// Client: the gRPC callback API on a few channels (gRPC's own callback threads plus one
// scheduling thread). Client and server share the machine's cores.
//
//   bench_coordinator [--quick] [--workers 100,500,2000] [--seconds 5] [--mode both|paced|closed]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fp8/v1/job_service.grpc.pb.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "fp8/v1/worker_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/services.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = fp8::v1;
using Clock = std::chrono::steady_clock;
using fp8::server::Role;

constexpr int kChannels = 4;  // client connections per server

double seconds_of(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- the bare echo server ------------------------------------------------------------------

class EchoWorkers final : public v1::WorkerService::Service {
 public:
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override {
    return grpc::Status::OK;
  }
};
class EchoTrainers final : public v1::TrainerService::Service {
 public:
  grpc::Status ReportProgress(grpc::ServerContext*, const v1::ReportProgressRequest*,
                              v1::ReportProgressResponse*) override {
    return grpc::Status::OK;
  }
};

// ---- the coordinator, as main.cc wires it ---------------------------------------------------

struct CoordinatorServer {
  fs::path dir;
  fp8::server::RendezvousStore rendezvous;
  std::unique_ptr<fp8::server::Coordinator> c;
  std::unique_ptr<fp8::server::JobServiceImpl> jobs;
  std::unique_ptr<fp8::server::WorkerServiceImpl> workers;
  std::unique_ptr<fp8::server::TrainerServiceImpl> trainers;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string admin_token, worker_token;

  ~CoordinatorServer() {
    if (c) c->shutdown();
    rendezvous.shutdown();
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server.reset();
    jobs.reset();
    workers.reset();
    trainers.reset();
    c.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_coordinator: %s\n", what.c_str());
  std::exit(1);
}

std::unique_ptr<CoordinatorServer> start_coordinator(int workers) {
  auto s = std::make_unique<CoordinatorServer>();
  s->dir = fs::temp_directory_path() / absl::StrCat("fp8_bench_coordinator_", ::getpid(), "_", workers);
  fs::remove_all(s->dir);
  fs::create_directories(s->dir);
  auto store = fp8::server::store::CoordinatorStore::open((s->dir / "fp8-coordinator.db").string());
  if (!store.ok()) die(std::string(store.status().message()));
  fp8::server::CoordinatorOptions options;
  options.heartbeat_interval = absl::Seconds(1);
  options.lost_after = absl::Seconds(600);  // setup of 2000 workers must not lose any
  options.roots.data = {s->dir};
  options.roots.checkpoint = {s->dir};
  options.advertise_address = "127.0.0.1:0";
  auto made = fp8::server::Coordinator::create(std::move(*store), s->rendezvous, options);
  if (!made.ok()) die(std::string(made.status().message()));
  s->c = std::move(*made);
  s->jobs = std::make_unique<fp8::server::JobServiceImpl>(*s->c);
  s->workers = std::make_unique<fp8::server::WorkerServiceImpl>(*s->c);
  s->trainers = std::make_unique<fp8::server::TrainerServiceImpl>(*s->c);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &s->port);
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.RegisterService(s->jobs.get());
  builder.RegisterService(s->workers.get());
  builder.RegisterService(s->trainers.get());
  s->server = builder.BuildAndStart();
  if (!s->server || s->port == 0) die("cannot start the coordinator's server");
  s->c->set_advertise_address(absl::StrCat("127.0.0.1:", s->port));
  auto admin = s->c->create_token(Role::kAdmin, "admin");
  auto worker = s->c->create_token(Role::kWorker, "workers");
  if (!admin.ok() || !worker.ok()) die("cannot create tokens");
  s->admin_token = *admin;
  s->worker_token = *worker;
  s->c->start_ticking();
  return s;
}

// ---- clients ---------------------------------------------------------------------------------

struct Stubs {
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> workers;
  std::vector<std::unique_ptr<v1::TrainerService::Stub>> trainers;
  std::vector<std::unique_ptr<v1::JobService::Stub>> jobs;
};

Stubs connect(int port) {
  Stubs s;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per channel
    auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args);
    s.workers.push_back(v1::WorkerService::NewStub(channel));
    s.trainers.push_back(v1::TrainerService::NewStub(channel));
    s.jobs.push_back(v1::JobService::NewStub(channel));
  }
  return s;
}

void authorize(grpc::ClientContext& ctx, const std::string& token) {
  ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
}

// One simulated worker and its trainer.
struct Sim {
  std::string worker_id, job_id, trainer_token;
  int attempt = 0;
  int64_t step = 0;  // touched only by this trainer's own (sequential) calls
  v1::HeartbeatRequest heartbeat;
};

// Runs fn(i) for i in [0, n) on `threads` threads.
template <typename Fn>
void parallel_for(int n, int threads, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

v1::JobSpec spec(const fs::path& dir, int i) {
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("bench-", i));
  spec.mutable_model()->set_dim(64);
  spec.mutable_model()->set_n_layers(1);
  spec.mutable_model()->set_n_heads(4);
  spec.mutable_model()->set_max_seq_len(32);
  spec.mutable_data()->set_path((dir / "data" / "corpus.txt").string());
  spec.mutable_data()->set_seq_len(32);
  spec.mutable_train()->set_steps(int64_t{1} << 40);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_train()->set_lr(1e-3);
  spec.mutable_checkpoint()->set_dir((dir / "ckpt" / absl::StrCat("job-", i)).string());
  spec.mutable_resources()->set_world_size(1);
  spec.mutable_resources()->set_device(v1::ResourceSpec::CPU);
  return spec;
}

// Registers n workers, submits n jobs, and gives every worker its rank (two heartbeats: the
// first returns StartRank, the second lists the rank RUNNING).
std::vector<Sim> set_up(CoordinatorServer& s, Stubs& stubs, int n) {
  std::vector<Sim> sims(n);
  auto fail = [](const char* what, const grpc::Status& st) {
    die(absl::StrCat(what, ": ", st.error_message()));
  };
  parallel_for(n, 4, [&](int i) {
    grpc::ClientContext ctx;
    authorize(ctx, s.worker_token);
    v1::RegisterWorkerRequest r;
    r.set_device_kind(v1::ResourceSpec::CPU);
    r.set_device_name("cpu");
    r.set_slots(1);
    r.set_address(absl::StrCat("127.0.0.1:", 20000 + i));
    r.set_version("0.1.0");
    v1::RegisterWorkerResponse out;
    grpc::Status st = stubs.workers[i % kChannels]->RegisterWorker(&ctx, r, &out);
    if (!st.ok()) fail("RegisterWorker", st);
    sims[i].worker_id = out.worker_id();
  });
  parallel_for(n, 4, [&](int i) {
    grpc::ClientContext ctx;
    authorize(ctx, s.admin_token);
    v1::SubmitJobRequest r;
    *r.mutable_spec() = spec(s.dir, i);
    v1::Job out;
    grpc::Status st = stubs.jobs[i % kChannels]->Submit(&ctx, r, &out);
    if (!st.ok()) fail("Submit", st);
  });
  parallel_for(n, 4, [&](int i) {
    Sim& sim = sims[i];
    grpc::ClientContext ctx;
    authorize(ctx, s.worker_token);
    v1::HeartbeatRequest r;
    r.set_worker_id(sim.worker_id);
    v1::HeartbeatResponse out;
    grpc::Status st = stubs.workers[i % kChannels]->Heartbeat(&ctx, r, &out);
    if (!st.ok()) fail("Heartbeat", st);
    if (out.commands_size() != 1 || !out.commands(0).has_start_rank()) {
      die(absl::StrCat("worker ", sim.worker_id, " got ", out.commands_size(), " commands, not one StartRank"));
    }
    const v1::StartRank& start = out.commands(0).start_rank();
    sim.job_id = start.job_id();
    sim.attempt = start.attempt();
    sim.trainer_token = start.trainer_token();
    sim.heartbeat.set_worker_id(sim.worker_id);
    v1::RankStatus* rank = sim.heartbeat.add_ranks();
    rank->set_job_id(sim.job_id);
    rank->set_attempt(sim.attempt);
    rank->set_rank(start.rank());
    rank->set_state(v1::RankStatus::RUNNING);
    rank->set_pid(100000 + i);
  });
  parallel_for(n, 4, [&](int i) {
    grpc::ClientContext ctx;
    authorize(ctx, s.worker_token);
    v1::HeartbeatResponse out;
    grpc::Status st = stubs.workers[i % kChannels]->Heartbeat(&ctx, sims[i].heartbeat, &out);
    if (!st.ok()) fail("Heartbeat", st);
  });
  return sims;
}

// ---- the load --------------------------------------------------------------------------------

enum class Mode { kPaced, kClosed };

struct KindStats {
  std::vector<float> latency_ms;  // calls that completed inside the window
  int64_t ok = 0, errors = 0;
  std::string first_error;
};

struct Result {
  double reports_per_s = 0, heartbeats_per_s = 0;
  double hb_p50 = 0, hb_p99 = 0, pr_p50 = 0, pr_p99 = 0;
  int64_t errors = 0;
  std::string first_error;
};

double percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

class Load {
 public:
  Load(Stubs& stubs, std::vector<Sim>& sims, std::string worker_token, Mode mode, double warmup_s, double seconds)
      : stubs_(stubs), sims_(sims), worker_token_(std::move(worker_token)), mode_(mode) {
    start_ = Clock::now();
    window_begin_ = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup_s));
    window_end_ = window_begin_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  Result run() {
    const int n = static_cast<int>(sims_.size());
    const std::chrono::nanoseconds second = std::chrono::seconds(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < n; ++i) {
        const auto phase = second * i / n;
        due_.push({start_ + phase, i, kHeartbeat});
        if (mode_ == Mode::kPaced) {
          due_.push({start_ + (phase + second / 2) % second, i, kReport});
        }
      }
    }
    if (mode_ == Mode::kClosed) {
      for (int i = 0; i < n; ++i) report(i, start_);
    }
    // The scheduling thread: issues each call when it is due.
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      if (Clock::now() >= window_end_) break;
      if (due_.empty() || due_.top().at > Clock::now()) {
        Clock::time_point until = due_.empty() ? window_end_ : std::min(due_.top().at, window_end_);
        cv_.wait_until(lock, until);
        continue;
      }
      Due d = due_.top();
      due_.pop();
      lock.unlock();
      if (d.kind == kHeartbeat) heartbeat(d.sim, d.at);
      else report(d.sim, d.at);
    }
    stopping_ = true;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return in_flight_ == 0; });
    }
    const double window = seconds_of(window_end_ - window_begin_);
    Result r;
    r.reports_per_s = stats_[kReport].ok / window;
    r.heartbeats_per_s = stats_[kHeartbeat].ok / window;
    r.hb_p50 = percentile(stats_[kHeartbeat].latency_ms, 0.50);
    r.hb_p99 = percentile(stats_[kHeartbeat].latency_ms, 0.99);
    r.pr_p50 = percentile(stats_[kReport].latency_ms, 0.50);
    r.pr_p99 = percentile(stats_[kReport].latency_ms, 0.99);
    r.errors = stats_[kHeartbeat].errors + stats_[kReport].errors;
    r.first_error = !stats_[kHeartbeat].first_error.empty() ? stats_[kHeartbeat].first_error : stats_[kReport].first_error;
    return r;
  }

 private:
  enum Kind { kHeartbeat = 0, kReport = 1 };
  struct Due {
    Clock::time_point at;
    int sim;
    Kind kind;
    bool operator>(const Due& o) const { return at > o.at; }
  };
  struct HeartbeatCall {
    grpc::ClientContext ctx;
    v1::HeartbeatResponse out;
  };
  struct ReportCall {
    grpc::ClientContext ctx;
    v1::ReportProgressRequest req;
    v1::ReportProgressResponse out;
  };

  void heartbeat(int i, Clock::time_point due) {
    auto* call = new HeartbeatCall;
    authorize(call->ctx, worker_token_);
    started();
    const Clock::time_point sent = Clock::now();
    stubs_.workers[i % kChannels]->async()->Heartbeat(
        &call->ctx, &sims_[i].heartbeat, &call->out, [this, call, i, due, sent](grpc::Status st) {
          delete call;
          done(kHeartbeat, st, sent);
          next(i, kHeartbeat, due);
        });
  }

  void report(int i, Clock::time_point due) {
    Sim& sim = sims_[i];
    auto* call = new ReportCall;
    authorize(call->ctx, sim.trainer_token);
    call->req.mutable_caller()->set_job_id(sim.job_id);
    call->req.mutable_caller()->set_attempt(sim.attempt);
    call->req.mutable_caller()->set_rank(0);
    v1::TrainingProgress* p = call->req.mutable_progress();
    p->set_step(++sim.step);
    p->set_window_steps(1);
    p->set_time_unix_ms(sim.step);
    p->set_loss(3.0 - 1e-6 * static_cast<double>(sim.step));
    p->set_grad_norm(1.0);
    p->set_lr(1e-3);
    p->set_tokens_per_second(1000);
    p->mutable_step_time()->set_step_ms(50);
    p->mutable_step_time()->set_compute_ms(40);
    started();
    const Clock::time_point sent = Clock::now();
    stubs_.trainers[i % kChannels]->async()->ReportProgress(
        &call->ctx, &call->req, &call->out, [this, call, i, due, sent](grpc::Status st) {
          delete call;
          done(kReport, st, sent);
          next(i, kReport, due);
        });
  }

  void started() {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
  }

  void done(Kind kind, const grpc::Status& st, Clock::time_point sent) {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (now >= window_begin_ && now < window_end_) {
      KindStats& k = stats_[kind];
      if (st.ok()) {
        ++k.ok;
        k.latency_ms.push_back(static_cast<float>(seconds_of(now - sent) * 1e3));
      } else {
        ++k.errors;
        if (k.first_error.empty()) k.first_error = st.error_message();
      }
    }
  }

  // Schedules a simulated worker's or trainer's next call (paced: a second after the last
  // one was due, at once when that has passed; closed-loop reports: at once).
  void next(int i, Kind kind, Clock::time_point due) {
    if (!stopping_ && Clock::now() < window_end_) {
      if (kind == kReport && mode_ == Mode::kClosed) {
        report(i, Clock::now());
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        due_.push({due + std::chrono::seconds(1), i, kind});
        if (due_.top().sim == i && due_.top().kind == kind) cv_.notify_all();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--in_flight_ == 0) cv_.notify_all();
  }

  Stubs& stubs_;
  std::vector<Sim>& sims_;
  const std::string worker_token_;
  const Mode mode_;
  Clock::time_point start_, window_begin_, window_end_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  int64_t in_flight_ = 0;
  KindStats stats_[2];
};

std::string ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms < 10 ? "%.2f" : "%.1f", ms);
  return buf;
}

std::string ratio(double a, double b) {
  if (b <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", a / b);
  return buf;
}

struct Row {
  int workers;
  Result coord, echo;
};

void print_table(const char* title, const std::vector<Row>& rows) {
  std::printf("\n%s\n", title);
  std::printf("| workers | reports/s coord | reports/s echo | ratio | hb p50/p99 ms coord | hb p50/p99 ms echo |"
              " progress p50/p99 ms coord | progress p50/p99 ms echo | latency ratio p50/p99 hb | progress |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %d | %.0f | %.0f | %s | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s |\n", r.workers,
                r.coord.reports_per_s, r.echo.reports_per_s, ratio(r.coord.reports_per_s, r.echo.reports_per_s).c_str(),
                ms(r.coord.hb_p50).c_str(), ms(r.coord.hb_p99).c_str(), ms(r.echo.hb_p50).c_str(),
                ms(r.echo.hb_p99).c_str(), ms(r.coord.pr_p50).c_str(), ms(r.coord.pr_p99).c_str(),
                ms(r.echo.pr_p50).c_str(), ms(r.echo.pr_p99).c_str(), ratio(r.coord.hb_p50, r.echo.hb_p50).c_str(),
                ratio(r.coord.hb_p99, r.echo.hb_p99).c_str(), ratio(r.coord.pr_p50, r.echo.pr_p50).c_str(),
                ratio(r.coord.pr_p99, r.echo.pr_p99).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<int> workers;
  double seconds = 0;
  std::string mode = "both";
  // As fp8-coordinator's main does (server/coordinator/main.cc).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"bench_coordinator: control-plane load on one fp8-coordinator vs a bare gRPC echo server"};
  app.add_flag("--quick", quick, "100 workers, 1.5 s per run");
  app.add_option("--workers", workers, "simulated workers (each with one world_size-1 job)")->delimiter(',');
  app.add_option("--seconds", seconds, "measured seconds per run (after 1 s of warm-up)");
  app.add_option("--mode", mode, "paced | closed | both")->check(CLI::IsMember({"paced", "closed", "both"}));
  CLI11_PARSE(app, argc, argv);
  if (workers.empty()) workers = quick ? std::vector<int>{100} : std::vector<int>{100, 500, 2000};
  if (seconds <= 0) seconds = quick ? 1.5 : 5;
  const double warmup = 1.0;

  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("bench_coordinator: %u cores, shared by the client (simulated workers and trainers, gRPC callback API, "
              "%d channels per server) and the servers in this one process\n", cores, kChannels);
  std::printf("each run: %.1f s warm-up, %.1f s measured; coordinator = real Coordinator + SQLite (temp dir) + services; "
              "echo = bare gRPC server answering OK\n", warmup, seconds);

  // The echo server lives through the whole run.
  EchoWorkers echo_workers;
  EchoTrainers echo_trainers;
  int echo_port = 0;
  grpc::ServerBuilder echo_builder;
  echo_builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  echo_builder.SetMaxReceiveMessageSize(8 << 20);
  echo_builder.RegisterService(&echo_workers);
  echo_builder.RegisterService(&echo_trainers);
  std::unique_ptr<grpc::Server> echo = echo_builder.BuildAndStart();
  if (!echo || echo_port == 0) die("cannot start the echo server");
  Stubs echo_stubs = connect(echo_port);

  std::vector<Row> paced, closed;
  for (int n : workers) {
    const Clock::time_point t0 = Clock::now();
    std::unique_ptr<CoordinatorServer> coord = start_coordinator(n);
    Stubs coord_stubs = connect(coord->port);
    std::vector<Sim> sims = set_up(*coord, coord_stubs, n);
    std::printf("\n%d workers: registered, %d jobs submitted and placed, every rank running (setup %.1f s)\n", n, n,
                seconds_of(Clock::now() - t0));
    std::fflush(stdout);
    auto run = [&](Mode m, std::vector<Row>& rows) {
      Row row{n, {}, {}};
      row.coord = Load(coord_stubs, sims, coord->worker_token, m, warmup, seconds).run();
      row.echo = Load(echo_stubs, sims, coord->worker_token, m, warmup, seconds).run();
      const char* name = m == Mode::kPaced ? "paced" : "closed";
      std::printf("  %-6s coordinator: %.0f reports/s, %.0f heartbeats/s%s%s | echo: %.0f reports/s, %.0f heartbeats/s%s%s\n",
                  name, row.coord.reports_per_s, row.coord.heartbeats_per_s,
                  row.coord.errors ? absl::StrCat(", ", row.coord.errors, " errors (", row.coord.first_error, ")").c_str() : "",
                  "", row.echo.reports_per_s, row.echo.heartbeats_per_s,
                  row.echo.errors ? absl::StrCat(", ", row.echo.errors, " errors (", row.echo.first_error, ")").c_str() : "",
                  "");
      std::fflush(stdout);
      rows.push_back(std::move(row));
    };
    if (mode != "closed") run(Mode::kPaced, paced);
    if (mode != "paced") run(Mode::kClosed, closed);
  }
  if (!paced.empty()) {
    print_table("paced: each worker heartbeats and each trainer reports once a second (offered: workers/s of each)",
               paced);
  }
  if (!closed.empty()) {
    print_table("closed loop: heartbeats once a second; each trainer reports again as soon as its last report returns",
               closed);
  }
  std::printf("\nratio = coordinator / echo. Client and server share the %u cores: the figures are a lower bound of "
              "what a coordinator on its own machine sustains.\n", cores);
  echo->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
