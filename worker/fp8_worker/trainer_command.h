// StartRank -> the fp8-train command line and environment that run that rank (pure: no
// files, no processes, so a unit test pins the contract with fp8-train).
//
//   <trainer> --config <rank dir>/job.yaml --rank R --world-size W
//             --coordinator <start.coordinator_address> --job-id J --attempt N
//             --rendezvous-namespace NS --listen <host of --address>
//             [--resume]                 attempt > 1: carry on from the last checkpoint
//             [--coordinator-ca FILE]    when fp8-worker itself was given one
//             [--cuda-device N]          a worker of GPU cuda:N
//   env: the daemon's environment, minus FP8_WORKER_TOKEN, plus FP8_TRAINER_TOKEN.
//
// The trainer token reaches the child only through its environment: a command line is
// readable by every user of the host (ps, /proc/<pid>/cmdline) and ends up in logs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/worker_service.pb.h"
#include "worker/fp8_worker/worker_config.h"

namespace fp8::worker {

inline constexpr char kTrainerTokenEnv[] = "FP8_TRAINER_TOKEN";

struct TrainerCommand {
  std::string rank_dir;     // <work dir>/<job>/attempt-<n>/rank-<r>
  std::string config_path;  // <rank dir>/job.yaml
  std::string log_path;     // <rank dir>/output.log
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value", the child's whole environment
};

// <work_dir>/<job_id>/attempt-<attempt>/rank-<rank>.
std::string rank_dir(const std::string& work_dir, const std::string& job_id, int attempt, int rank);

// base_env: the daemon's environment ("NAME=value" entries). InvalidArgument, naming the
// field, for a StartRank that cannot be run (a job id that is not a plain folder name, a
// rank outside [0, world_size), an attempt < 1, no trainer token or coordinator address).
absl::StatusOr<TrainerCommand> build_trainer_command(const v1::StartRank& start, const WorkerConfig& config,
                                                   const std::vector<std::string>& base_env);

// The daemon's own environment as "NAME=value" entries.
std::vector<std::string> current_environment();

}  // namespace fp8::worker
