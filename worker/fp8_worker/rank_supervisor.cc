#include "worker/fp8_worker/rank_supervisor.h"

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/jobspec/to_yaml.h"
#include "common/log/log.h"
#include "common/rpc/trainer_exit_codes.h"
#include "worker/fp8_worker/line_text.h"
#include "worker/fp8_worker/trainer_command.h"

namespace fp8::worker {
namespace {

constexpr int kSpawnFailedExitCode = 127;  // as a shell reports "command not found"

absl::Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string describe(const RankExit& e) {
  if (e.signal) return absl::StrCat("killed by signal ", *e.signal);
  return absl::StrCat("exited with code ", e.exit_code.value_or(-1));
}

}  // namespace

RankSupervisor::RankSupervisor(WorkerConfig config, LogForwarder* forwarder, std::vector<std::string> base_env)
    : config_(std::move(config)), forwarder_(forwarder), base_env_(std::move(base_env)) {}

RankSupervisor::~RankSupervisor() = default;

void RankSupervisor::spawn_failed(const RankKey& key, const std::string& why, int exit_code) {
  log::error(absl::StrCat(key.to_string(), ": cannot start: ", why));
  RankExit e;
  e.key = key;
  e.exit_code = exit_code;
  e.message = clean_line(why);
  e.last_status.set_job_id(key.job_id);
  e.last_status.set_attempt(key.attempt);
  e.last_status.set_rank(key.rank);
  e.last_status.set_state(v1::RankStatus::STARTING);
  exits_.push_back(std::move(e));
}

void RankSupervisor::start(const v1::StartRank& start) {
  RankKey key{start.job_id(), start.attempt(), start.rank()};
  if (ranks_.count(key) > 0) {
    log::warn(absl::StrCat(key.to_string(), ": StartRank for a rank already running; ignored"));
    return;
  }
  absl::StatusOr<TrainerCommand> cmd = build_trainer_command(start, config_, base_env_);
  if (!cmd.ok()) {
    // A spec whose files this worker refuses (errors name the field: "spec.data.path: ...
    // is not a regular file", a path outside its root) is refused again on a restart: a
    // configuration failure, which restarts.on leaves out by default.
    const bool config = absl::StartsWith(cmd.status().message(), "spec.");
    return spawn_failed(key, std::string(cmd.status().message()),
                       config ? rpc::kExitConfiguration : kSpawnFailedExitCode);
  }
  std::error_code ec;
  std::filesystem::create_directories(cmd->rank_dir, ec);
  if (ec) return spawn_failed(key, absl::StrCat("cannot create ", cmd->rank_dir, ": ", ec.message()), kSpawnFailedExitCode);
  if (absl::Status st = write_file(cmd->config_path, jobspec::to_yaml(start.spec())); !st.ok()) {
    return spawn_failed(key, std::string(st.message()), kSpawnFailedExitCode);
  }

  LineSink sink;
  if (forwarder_ != nullptr) {
    forwarder_->open(key, start.coordinator_address(), start.trainer_token());
    sink = [fw = forwarder_, key](absl::string_view line, int64_t ms, std::optional<log::Level> level) {
      fw->append(key, line, ms, level);
    };
  }
  absl::StatusOr<std::unique_ptr<RankProcess>> p = RankProcess::spawn(cmd->argv, cmd->env, cmd->log_path, sink);
  if (!p.ok()) {
    if (forwarder_ != nullptr) forwarder_->close(key);
    return spawn_failed(key, std::string(p.status().message()), kSpawnFailedExitCode);
  }
  log::info(absl::StrCat(key.to_string(), ": started ", config_.trainer, " (pid ", (*p)->pid(), ", world size ",
                         start.world_size(), "), log ", cmd->log_path));
  ranks_[key].process = std::move(*p);
}

void RankSupervisor::stop_rank(Rank& r, int grace_seconds) {
  const Clock::time_point kill_at = Clock::now() + std::chrono::seconds(std::max(grace_seconds, 0));
  if (r.killed) return;
  if (grace_seconds <= 0) {
    r.process->signal(SIGKILL);
    r.killed = true;
    r.kill_at = kill_at;
    return;
  }
  if (!r.kill_at) {
    r.process->signal(SIGTERM);
    // A stopped rank (SIGSTOP, a debugger) would hold SIGTERM pending until the SIGKILL:
    // continued, it checkpoints and exits within the grace like any other.
    r.process->signal(SIGCONT);
    r.kill_at = kill_at;
  } else if (kill_at < *r.kill_at) {
    r.kill_at = kill_at;
  }
}

void RankSupervisor::stop(const std::string& job_id, int attempt, int grace_seconds, const std::string& reason) {
  int n = 0;
  for (auto& [key, r] : ranks_) {
    if (key.job_id != job_id || key.attempt != attempt) continue;
    stop_rank(r, grace_seconds);
    ++n;
  }
  log::info(absl::StrCat("stop ", job_id, " attempt ", attempt, " (", reason.empty() ? "no reason given" : reason, "): ",
                         n == 0 ? "no rank of it runs here" : absl::StrCat(n, " rank(s), grace ", grace_seconds, " s")));
}

void RankSupervisor::stop_all(int grace_seconds, const std::string& reason) {
  if (ranks_.empty()) return;
  log::info(absl::StrCat("stopping all ", ranks_.size(), " rank(s) (", reason, "), grace ", grace_seconds, " s"));
  for (auto& entry : ranks_) stop_rank(entry.second, grace_seconds);
}

void RankSupervisor::poll() {
  const Clock::time_point now = Clock::now();
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    const RankKey& key = it->first;
    Rank& r = it->second;
    std::optional<ProcessExit> done = r.process->poll();
    if (!done) {
      if (r.kill_at && !r.killed && now >= *r.kill_at) {
        log::warn(absl::StrCat(key.to_string(), ": still running after its grace period; SIGKILL"));
        r.process->signal(SIGKILL);
        r.killed = true;
      }
      ++it;
      continue;
    }
    RankExit e;
    e.key = key;
    e.exit_code = done->exit_code;
    e.signal = done->signal;
    e.message = r.process->last_line();
    e.last_status = status_of(key, r);
    log::write(e.exit_code == 0 ? log::Level::kInfo : log::Level::kWarning,
               absl::StrCat(key.to_string(), ": ", describe(e), e.message.empty() ? "" : ": " + e.message));
    // Its last lines go out now, from the forwarder's thread; the session holds the exit
    // report until they have (LogsDelivered).
    if (forwarder_ != nullptr) forwarder_->close(key);
    exits_.push_back(std::move(e));
    it = ranks_.erase(it);
  }
}

bool RankSupervisor::logs_delivered(const RankKey& key) const {
  return forwarder_ == nullptr || forwarder_->delivered(key);
}

std::vector<RankExit> RankSupervisor::take_exits() {
  std::vector<RankExit> out;
  out.swap(exits_);
  return out;
}

v1::RankStatus RankSupervisor::status_of(const RankKey& key, const Rank& r) const {
  v1::RankStatus s;
  s.set_job_id(key.job_id);
  s.set_attempt(key.attempt);
  s.set_rank(key.rank);
  s.set_pid(r.process->pid());
  // The daemon cannot see inside fp8-train; its first line of output is the best sign
  // that it got past start-up.
  if (r.kill_at) {
    s.set_state(v1::RankStatus::STOPPING);
  } else if (r.process->has_output()) {
    s.set_state(v1::RankStatus::RUNNING);
  } else {
    s.set_state(v1::RankStatus::STARTING);
  }
  return s;
}

std::vector<v1::RankStatus> RankSupervisor::statuses() const {
  std::vector<v1::RankStatus> out;
  out.reserve(ranks_.size());
  for (const auto& [key, r] : ranks_) out.push_back(status_of(key, r));
  return out;
}

}  // namespace fp8::worker
