// fp8-train: trains one job on this process, or on N local processes with FSDP.
//
//   fp8-train --config job.yaml [--resume] [--set train.steps=500 ...]
//   fp8-train --nproc 2 --config job.yaml          N local ranks (local_launcher.h)
//   fp8-train --rank 1 --world-size 2 --rendezvous DIR --config job.yaml
//                                                  one rank of a group meeting in DIR
//
// --nproc and --world-size set resources.world_size. Under FSDP only rank 0 prints the step
// log; any rank's error is printed with its rank. --timeout bounds the rendezvous and
// every collective: a rank whose peer died fails within it, naming the peer.
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
#include "worker/engine/dist/file_store.h"
#include "worker/engine/dist/gloo_process_group.h"
#include "worker/engine/tensor/device.h"
#include "worker/engine/train/trainer.h"
#include "worker/fp8_train/blas_environment.h"
#include "worker/fp8_train/console_observer.h"
#include "worker/fp8_train/local_launcher.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // second signal: stop now
}

std::string g_who = "fp8-train";  // "fp8-train [rank 1]" under FSDP

int fail(const absl::Status& s, int code = 1) {
  std::fprintf(stderr, "%s: %s\n", g_who.c_str(), std::string(s.message()).c_str());
  return code;
}

// Ranks other than 0 keep quiet but for warnings, which name the rank.
class OtherRankObserver final : public fp8::engine::TrainObserver {
 public:
  void on_warning(const std::string& w) override { std::fprintf(stderr, "%s: warning: %s\n", g_who.c_str(), w.c_str()); }
};

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
  int nproc = 0, rank = -1, world_size = 0;
  std::string rendezvous, listen = "127.0.0.1";
  double timeout_s = 300;
  app.add_option("--config", config, "the job file (job.yaml)")->required();
  app.add_flag("--resume", resume, "continue from the newest good checkpoint in checkpoint.dir");
  app.add_option("--set", overrides, "override a field of the job file, e.g. --set train.steps=500")
      ->type_name("FIELD=VALUE");
  auto* nproc_opt = app.add_option("--nproc", nproc, "train with FSDP on N local processes")->check(CLI::Range(1, 1024));
  auto* rank_opt = app.add_option("--rank", rank, "this process's rank in an FSDP group")->check(CLI::NonNegativeNumber);
  auto* world_opt = app.add_option("--world-size", world_size, "ranks in the group")->check(CLI::Range(1, 65536));
  auto* rdzv_opt = app.add_option("--rendezvous", rendezvous, "directory where the ranks meet (fresh for each run)");
  app.add_option("--listen", listen, "address or interface this rank listens on for its peers")
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "seconds the rendezvous and each collective wait for a peer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  rank_opt->needs(world_opt, rdzv_opt);
  world_opt->needs(rank_opt);
  rdzv_opt->needs(rank_opt);
  nproc_opt->excludes(rank_opt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (rank_opt->count() > 0 && rank >= world_size) {
    std::fprintf(stderr, "fp8-train: --rank %d is not below --world-size %d\n", rank, world_size);
    return 2;
  }
  const bool joining = rank_opt->count() > 0;
  if (joining) g_who = "fp8-train [rank " + std::to_string(rank) + "]";
  std::vector<std::string> all_overrides = overrides;
  if (nproc > 0) all_overrides.push_back("resources.world_size=" + std::to_string(nproc));
  if (joining) all_overrides.push_back("resources.world_size=" + std::to_string(world_size));

  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::LoadJobSpecFile(config, all_overrides);
  if (!spec.ok()) return fail(spec.status(), 2);
  const int job_world = spec->resources().world_size();
  if (job_world > 1 && !joining && nproc == 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
                    config, ": resources.world_size is ", job_world, ": run it with --nproc ", job_world,
                    ", or start each rank with --rank R --world-size ", job_world, " --rendezvous DIR")),
                2);
  }
  if (!resume && (!joining || rank == 0)) {
    if (absl::Status s = refuse_to_overwrite(spec->checkpoint().dir()); !s.ok()) return fail(s, 2);
  }
  if (nproc > 1) {
    fp8::train_cli::LocalLaunch launch;
    launch.nproc = nproc;
    launch.rank_args = {"--config", config, "--timeout", std::to_string(timeout_s)};
    if (resume) launch.rank_args.push_back("--resume");
    for (const std::string& o : overrides) {
      launch.rank_args.push_back("--set");
      launch.rank_args.push_back(o);
    }
    return fp8::train_cli::run_local_ranks(launch);
  }
  size_thread_pools(spec->resources().cpus_per_rank());

  std::unique_ptr<fp8::engine::Device> cuda;
  const fp8::engine::Device* device = &fp8::engine::Device::cpu();
  if (spec->resources().device() == fp8::v1::ResourceSpec::CUDA) {
    absl::StatusOr<std::unique_ptr<fp8::engine::Device>> d = fp8::engine::Device::cuda(0);
    if (!d.ok()) return fail(d.status());
    cuda = std::move(*d);
    device = cuda.get();
  }

  // Under FSDP, the ranks meet through a file store in the rendezvous directory.
  std::unique_ptr<fp8::engine::dist::ProcessGroup> group;
  if (joining) {
    if (device->is_cuda()) {
      return fail(absl::UnimplementedError("FSDP on CUDA devices (NCCL) is not wired into fp8-train yet; "
                                           "use resources.device: cpu"));
    }
    absl::StatusOr<std::unique_ptr<fp8::engine::dist::FileStore>> store =
        fp8::engine::dist::FileStore::open(rendezvous);
    if (!store.ok()) return fail(store.status());
    fp8::engine::dist::ProcessGroupOptions options;
    options.timeout = absl::Seconds(timeout_s);
    absl::StatusOr<std::unique_ptr<fp8::engine::dist::ProcessGroup>> joined =
        fp8::engine::dist::make_gloo_process_group(**store, rank, world_size, options, listen);
    if (!joined.ok()) return fail(joined.status());
    group = std::move(*joined);
  }

  absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> trainer =
      fp8::engine::Trainer::create(*spec, *device, group.get());
  if (!trainer.ok()) return fail(trainer.status());
  fp8::train_cli::ConsoleObserver console(stdout);
  OtherRankObserver quiet;
  fp8::engine::TrainObserver& observer = rank <= 0 ? static_cast<fp8::engine::TrainObserver&>(console) : quiet;
  if (resume) {
    absl::StatusOr<int64_t> from = (*trainer)->resume(observer);
    if (!from.ok()) return fail(from.status());
    if (*from == 0 && rank <= 0) {
      std::printf("no good checkpoint in %s: starting from step 1\n", spec->checkpoint().dir().c_str());
    }
  }

  // A signal the parent set to be ignored (a shell's background job ignores SIGINT) stays
  // ignored.
  for (int sig : {SIGINT, SIGTERM}) {
    if (std::signal(sig, on_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
  }
  fp8::engine::RunControl control;
  control.stop = &g_stop;
  absl::StatusOr<fp8::engine::TrainSummary> summary = (*trainer)->run(observer, control);
  if (!summary.ok()) return fail(summary.status());
  return summary->stopped_early ? 130 : 0;
}
