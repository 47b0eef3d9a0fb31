// fp8-train: trains one job on this process.
//
//   fp8-train --config job.yaml [--resume] [--set train.steps=500 ...]
//
// Prints a line per log interval and a summary. Ctrl-C (SIGINT) or SIGTERM finishes the
// step in flight, writes a checkpoint and exits with 130; `--resume` continues from the
// newest good checkpoint, bit for bit as if the run had never stopped (same machine and
// thread count). A second Ctrl-C exits at once.
//
// Without --resume, a checkpoint.dir that already holds checkpoints is refused (exit 2).
//
// Exit status: 0 trained to the last step; 2 bad command line or job file; 130 stopped
// by a signal (checkpoint written); 1 any other failure.
#include <cblas.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/jobspec/loader.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/tensor/device.h"
#include "worker/engine/train/trainer.h"
#include "worker/fp8_train/blas_environment.h"
#include "worker/fp8_train/console_observer.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // second signal: stop now
}

int fail(const absl::Status& s, int code = 1) {
  std::fprintf(stderr, "fp8-train: %s\n", std::string(s.message()).c_str());
  return code;
}

// resources.cpus_per_rank sizes the kernels' thread pool (which reads FP8_NUM_THREADS at
// first use) and OpenBLAS's, unless the user set FP8_NUM_THREADS already.
void size_thread_pools(int cpus) {
  if (cpus <= 0 || std::getenv("FP8_NUM_THREADS") != nullptr) return;
  setenv("FP8_NUM_THREADS", std::to_string(cpus).c_str(), /*overwrite=*/0);
  openblas_set_num_threads(cpus);
}

// A fresh run in a directory holding another run's checkpoints would interleave the two
// (retention could even delete the new run's checkpoints as older than the old run's), and
// a later --resume would pick whichever is newest.
absl::Status refuse_to_overwrite(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<fp8::checkpoint::CheckpointEntry>> found = fp8::checkpoint::ListCheckpoints(dir);
  if (!found.ok()) return found.status();
  for (const fp8::checkpoint::CheckpointEntry& e : *found) {  // newest first
    if (e.state != fp8::checkpoint::CheckpointState::kCommitted) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint.dir ", dir, " already holds checkpoints (newest: step ", e.step,
                     "); continue that run with --resume, or give this one another checkpoint.dir"));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  fp8::train_cli::ensure_blas_environment(argv);
  CLI::App app{"fp8-train: train one fp8 job on this process"};
  std::string config;
  bool resume = false;
  std::vector<std::string> overrides;
  app.add_option("--config", config, "the job file (job.yaml)")->required();
  app.add_flag("--resume", resume, "continue from the newest good checkpoint in checkpoint.dir");
  app.add_option("--set", overrides, "override a field of the job file, e.g. --set train.steps=500")
      ->type_name("FIELD=VALUE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::LoadJobSpecFile(config, overrides);
  if (!spec.ok()) return fail(spec.status(), 2);
  size_thread_pools(spec->resources().cpus_per_rank());

  std::unique_ptr<fp8::engine::Device> cuda;
  const fp8::engine::Device* device = &fp8::engine::Device::cpu();
  if (spec->resources().device() == fp8::v1::ResourceSpec::CUDA) {
    absl::StatusOr<std::unique_ptr<fp8::engine::Device>> d = fp8::engine::Device::cuda(0);
    if (!d.ok()) return fail(d.status());
    cuda = std::move(*d);
    device = cuda.get();
  }

  if (!resume) {
    if (absl::Status s = refuse_to_overwrite(spec->checkpoint().dir()); !s.ok()) return fail(s, 2);
  }

  absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> trainer = fp8::engine::Trainer::create(*spec, *device);
  if (!trainer.ok()) return fail(trainer.status());
  fp8::train_cli::ConsoleObserver console(stdout);
  if (resume) {
    absl::StatusOr<int64_t> from = (*trainer)->resume(console);
    if (!from.ok()) return fail(from.status());
    if (*from == 0) std::printf("no good checkpoint in %s: starting from step 1\n", spec->checkpoint().dir().c_str());
  }

  // A signal the parent set to be ignored (a shell's background job ignores SIGINT) stays
  // ignored.
  for (int sig : {SIGINT, SIGTERM}) {
    if (std::signal(sig, on_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
  }
  fp8::engine::RunControl control;
  control.stop = &g_stop;
  absl::StatusOr<fp8::engine::TrainSummary> summary = (*trainer)->run(console, control);
  if (!summary.ok()) return fail(summary.status());
  return summary->stopped_early ? 130 : 0;
}
