// Runs training jobs as real ranks for the FSDP tests: each rank is a forked child process
// that joins a Gloo group over loopback (or an NCCL group, on GPUs) through a file store
// and trains with the real Trainer; the parent only forks, waits and reads what each rank wrote. Single-process
// references run in a child too, so the parent never starts a thread pool before forking.
//
// Each rank writes one line per step (loss and grad norm as exact hex doubles, and its
// communication counters) and one per fp8 cast the step reported, then "ok" or
// "error <message>".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fp8/v1/job.pb.h"
#include "gtest/gtest.h"
#include "worker/engine/fsdp/fsdp_model.h"

namespace fp8::engine::testing {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double all_gather_fp8_bytes = 0;
  double all_gather_f32_bytes = 0;
  double all_gather_bf16_bytes = 0;
  double reduce_scatter_f32_bytes = 0;
  double reduce_scatter_bf16_bytes = 0;
  double all_reduces = 0;
  double weight_scale_all_reduces = 0;
  double tensor_all_reduces = 0;       // StepComm's tensor-parallel axis
  double tensor_all_reduce_bytes = 0;
  double sequence_gather_fp8_bytes = 0;  // StepComm's sequence-parallel all-gathers
  double sequence_gather_bytes = 0;
  double peak_memory_bytes = 0;    // StepReport::peak_memory_bytes
  double memory_in_use_after = 0;  // the device's allocated bytes when the step was reported
};

// One fp8 cast as a step reported it (TrainObserver::on_cast_numerics).
struct CastRecord {
  int64_t step = 0;
  std::string layer;   // "layers.0.attention.wq"
  std::string tensor;  // "input", "weight", "grad_output"
  float amax = 0;
  float scale = 0;
};

struct RankOutcome {
  std::vector<StepRecord> steps;
  std::vector<CastRecord> casts;
  bool ok = false;
  std::string error;       // the rank's error message (its absl::Status), if it failed
  bool exited = false;     // the process ended on its own (not killed by the harness)
  int exit_code = -1;
  int signal = 0;
  double seconds = 0;      // from start to exit
  // The most device memory creating the trainer (model, shards, optimizer) had in use.
  double startup_peak_bytes = 0;
};

struct RunOptions {
  int world_size = 1;         // 0: a single process without a process group
  bool resume = false;
  int64_t stop_after_step = 0;
  double timeout_seconds = 20;  // the process group's
  // Kill this rank with SIGKILL when it reports this step (-1: nobody).
  int kill_rank = -1;
  int64_t kill_at_step = 0;
  // This rank stops (SIGSTOP: alive, its connections open, never answering) when it
  // reports this step (-1: nobody); the harness kills it once every other rank has exited.
  int stall_rank = -1;
  int64_t stall_at_step = 0;
  // This rank's stop flag (a signal's, RunControl::stop) rises as this step starts (-1: nobody).
  int stop_rank = -1;
  int64_t stop_at_step = 0;
  double deadline_seconds = 120;  // the harness kills everything after this
  // How FSDP moves a unit's parameters (fsdp_model.h).
  fsdp::UnitCollectives collectives = fsdp::UnitCollectives::kPacked;
  // Train on GPUs: rank r on CUDA device r (a single process on device 0), the ranks over
  // NCCL instead of Gloo. A rank fails, saying why, where that is not possible.
  bool cuda = false;
  // With cuda: NCCL's collectives wait on the host instead of being queued on the device
  // (the group gets no compute stream).
  bool nccl_host_wait = false;
};

// GPUs the CUDA runtime sees, asked in a child process: a parent that initialised CUDA
// could not fork ranks that use it. 0 without CUDA in the build, a driver or a GPU.
int cuda_device_count();

// Trains `spec` (train.log_every should be 1) and returns one outcome per rank (one for a
// single process).
std::vector<RankOutcome> run_ranks(const v1::JobSpec& spec, const RunOptions& options,
                                  const std::filesystem::path& scratch);

// Success when every rank trained to the end; else the first failure, with its exit.
::testing::AssertionResult all_ok(const std::vector<RankOutcome>& ranks);

}  // namespace fp8::engine::testing
