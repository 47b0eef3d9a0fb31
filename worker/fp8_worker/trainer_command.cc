#include "worker/fp8_worker/trainer_command.h"

#include <unistd.h>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fs/open_beneath.h"
#include "common/fs/open_matches_beneath.h"

extern char** environ;

namespace fp8::worker {
namespace {

// The job id becomes a folder name: refuse anything that could climb out of work_dir.
bool is_plain_name(const std::string& s) {
  if (s.empty() || s.size() > 200 || s == "." || s == "..") return false;
  for (char c : s) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

}  // namespace

std::string rank_dir(const std::string& work_dir, const std::string& job_id, int attempt, int rank) {
  return absl::StrCat(work_dir, "/", job_id, "/attempt-", attempt, "/rank-", rank);
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

absl::StatusOr<TrainerCommand> build_trainer_command(const v1::StartRank& start, const WorkerConfig& config,
                                                   const std::vector<std::string>& base_env) {
  if (!is_plain_name(start.job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("StartRank.job_id '", start.job_id(), "' is not a plain folder name"));
  }
  if (start.attempt() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("StartRank.attempt ", start.attempt(), " is < 1"));
  }
  if (start.world_size() < 1 || start.rank() < 0 || start.rank() >= start.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("StartRank.rank ", start.rank(), " is outside [0, world_size ",
                                                   start.world_size(), ")"));
  }
  if (start.coordinator_address().empty()) {
    return absl::InvalidArgumentError("StartRank.coordinator_address is empty");
  }
  if (start.trainer_token().empty()) return absl::InvalidArgumentError("StartRank.trainer_token is empty");
  // The coordinator admitted the job's paths under these roots; they are checked again here,
  // on the host that will open them (a link may have appeared since), and the trainer
  // opens them beneath the roots itself.
  if (!start.data_root().empty()) {
    if (fs_confined::is_glob_pattern(start.spec().data().path())) {
      absl::StatusOr<fs_confined::OpenMatches> shards =
          fs_confined::open_matches_beneath(start.data_root(), start.spec().data().path(), "spec.data.path");
      if (!shards.ok()) return shards.status();
    } else {
      absl::StatusOr<fs_confined::UniqueFd> data =
          fs_confined::open_file_beneath(start.data_root(), start.spec().data().path(), "spec.data.path");
      if (!data.ok()) return data.status();
    }
    const v1::DataSpec& d = start.spec().data();
    for (auto [has, path, field] : {std::tuple{d.has_val_path(), d.val_path(), "spec.data.val_path"},
                                    std::tuple{d.has_tokenizer_model(), d.tokenizer_model(),
                                               "spec.data.tokenizer_model"}}) {
      if (!has) continue;
      absl::StatusOr<fs_confined::UniqueFd> file = fs_confined::open_file_beneath(start.data_root(), path, field);
      if (!file.ok()) return file.status();
    }
    if (start.spec().model().has_init_from()) {
      absl::StatusOr<fs_confined::UniqueFd> dir =
          fs_confined::open_dir_beneath(start.data_root(), start.spec().model().init_from(), "spec.model.init_from");
      if (!dir.ok()) return dir.status();
    }
  }
  if (!start.checkpoint_root().empty() &&
      !fs_confined::is_beneath(start.checkpoint_root(), start.spec().checkpoint().dir())) {
    return absl::InvalidArgumentError(absl::StrCat("spec.checkpoint.dir '", start.spec().checkpoint().dir(),
                                                   "' is not beneath ", start.checkpoint_root()));
  }

  TrainerCommand cmd;
  cmd.rank_dir = rank_dir(config.work_dir, start.job_id(), start.attempt(), start.rank());
  cmd.config_path = cmd.rank_dir + "/job.yaml";
  cmd.log_path = cmd.rank_dir + "/output.log";
  cmd.argv = {config.trainer,
              "--config", cmd.config_path,
              "--rank", absl::StrCat(start.rank()),
              "--world-size", absl::StrCat(start.world_size()),
              "--coordinator", start.coordinator_address(),
              "--job-id", start.job_id(),
              "--attempt", absl::StrCat(start.attempt()),
              "--rendezvous-namespace", start.rendezvous_namespace(),
              "--listen", config.listen_host,
              // The worker reads each line's level and time back to forward them.
              "--log-format", "json"};
  // Attempt 1 starts from scratch (fp8-train refuses a checkpoint dir that already holds
  // checkpoints); every restart carries on from the last committed one.
  if (start.attempt() > 1) cmd.argv.push_back("--resume");
  if (!start.data_root().empty()) {
    cmd.argv.push_back("--data-root");
    cmd.argv.push_back(start.data_root());
  }
  if (!start.checkpoint_root().empty()) {
    cmd.argv.push_back("--checkpoint-root");
    cmd.argv.push_back(start.checkpoint_root());
  }
  if (!config.coordinator_ca.empty()) {
    cmd.argv.push_back("--coordinator-ca");
    cmd.argv.push_back(config.coordinator_ca);
  }
  // The rank trains on this worker's GPU (device_name is "cuda:<N>", checked at parse time).
  if (config.device_kind == v1::ResourceSpec::CUDA && absl::StartsWith(config.device_name, "cuda:")) {
    cmd.argv.push_back("--cuda-device");
    cmd.argv.push_back(config.device_name.substr(5));
  }

  // The worker's own token is not the rank's business; an inherited FP8_TRAINER_TOKEN
  // would be a stale one.
  for (const std::string& e : base_env) {
    if (absl::StartsWith(e, "FP8_WORKER_TOKEN=") || absl::StartsWith(e, absl::StrCat(kTrainerTokenEnv, "="))) {
      continue;
    }
    cmd.env.push_back(e);
  }
  cmd.env.push_back(absl::StrCat(kTrainerTokenEnv, "=", start.trainer_token()));
  return cmd;
}

}  // namespace fp8::worker
