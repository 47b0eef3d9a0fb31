// fp8-train: trains one job on this process, or on N local processes with FSDP.
//
//   fp8-train --config job.yaml [--resume] [--set train.steps=500 ...]
//   fp8-train --nproc 2 --config job.yaml          N local ranks (local_launcher.h)
//   fp8-train --rank 1 --world-size 2 --rendezvous DIR --config job.yaml
//                                                  one rank of a group meeting in DIR
//   fp8-train --config job.yaml --rank R --world-size W --coordinator HOST:PORT
//             --job-id job-7 --attempt 2 --rendezvous-namespace job-7/attempt-2/
//             [--coordinator-ca FILE] [--listen HOST] [--timeout S] [--resume]
//                                                  one rank of a job attempt the worker
//                                                  daemon started (coordinator mode)
//
// Coordinator mode: the ranks meet through the coordinator's RendezvousService (in the
// attempt's namespace) instead of a directory, and every rank reports its progress (rank 0
// also its checkpoint commits) to the coordinator's TrainerService from a background
// thread. The attempt's trainer token comes from the environment variable
// FP8_TRAINER_TOKEN, never the command line (which any user can read in ps); it is sent as
// "authorization: Bearer <token>". --coordinator-ca FILE (PEM) makes the channel TLS with
// that root; without it the channel is plaintext. When the coordinator says the attempt
// ended, the rank stops as if signalled (checkpoint written) but exits with 1, printing
// "the coordinator ended this attempt".
//
// --nproc and --world-size set resources.world_size. Under FSDP only rank 0 prints the step
// log; any rank's error is printed with its rank. --timeout bounds the rendezvous, and the
// collectives until train.collective_timeout_seconds takes over: a rank whose peer died
// fails within it, naming the peer.
//
// Environment: FP8_NUM_THREADS caps the CPU kernels' threads (below
// resources.cpus_per_rank); FP8_FSDP_COLLECTIVES=packed|per_parameter picks how FSDP moves a
// unit's parameters (fsdp_model.h; packed by default); FP8_CUDA_ATTENTION and
// FP8_NCCL_HOST_WAIT switch GPU kernels (read_cuda_switches).
//
// resources.device: cuda trains on GPU --cuda-device (default 0; under --nproc, rank r
// uses GPU r), with NCCL between the ranks instead of Gloo.
//
// Logs a line per log interval and a summary on stdout (common/log/log.h; --log-format
// text, or json as the worker daemon runs it to forward each line's level and time); bad
// input is refused with a plain message on stderr. Ctrl-C (SIGINT) or SIGTERM finishes the
// step in flight, writes a checkpoint and exits with 130; `--resume` continues from the
// newest good checkpoint, bit for bit as if the run had never stopped (same machine and
// thread count). A second Ctrl-C exits at once.
//
// Without --resume, a checkpoint.dir that already holds checkpoints is refused (exit 2).
//
// Exit status: 0 trained to the last step; 2 bad command line or job file (or no token in
// coordinator mode); 130 stopped by a signal (checkpoint written); 1 any other failure,
// the coordinator ending the attempt included.
#include <cblas.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/jobspec/loader.h"
#include "common/jobspec/memory_estimate.h"
#include "common/jobspec/model_flops.h"
#include "common/log/log.h"
#include "common/rpc/coordinator_channel.h"
#include "common/rpc/trainer_exit_codes.h"
#include "kernels/cpu/parallel.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"
#ifdef FP8_HAVE_NCCL
#include "worker/engine/collectives/nccl/nccl_process_group.h"
#endif
#include "worker/engine/tensor/device.h"
#include "worker/engine/train/trainer.h"
#include "worker/fp8_train/blas_environment.h"
#include "worker/fp8_train/console_observer.h"
#include "worker/fp8_train/amax_resume.h"
#include "worker/fp8_train/confined_paths.h"
#include "worker/fp8_train/coordinator_reporter.h"
#include "worker/fp8_train/coordinator_store.h"
#include "worker/fp8_train/device_peak.h"
#include "worker/fp8_train/local_launcher.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // second signal: stop now
}

std::string g_who = "fp8-train";  // "fp8-train [rank 1]" under FSDP

// A failed run's exit code names its class for the coordinator's restart policy
// (common/rpc/trainer_exit_codes.h): a divergence or an exhausted allocation repeats on
// restart, a peer that died or went silent (process_group.h's Unavailable and
// DeadlineExceeded) may not.
int exit_code_for(const absl::Status& s) {
  if (fp8::engine::is_divergence(s)) return fp8::rpc::kExitDivergence;
  switch (s.code()) {
    case absl::StatusCode::kResourceExhausted:
      return fp8::rpc::kExitOutOfMemory;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return fp8::rpc::kExitPeerLost;
    default:
      return 1;
  }
}

int fail(const absl::Status& s, int code) {
  std::fprintf(stderr, "%s: %s\n", g_who.c_str(), std::string(s.message()).c_str());
  return code;
}
int fail(const absl::Status& s) { return fail(s, exit_code_for(s)); }

// Ranks other than 0 keep quiet but for warnings, which name the rank.
class OtherRankObserver final : public fp8::engine::TrainObserver {
 public:
  void on_warning(const std::string& w) override { fp8::log::warn(w); }
};

// resources.cpus_per_rank sizes the kernels' thread pool and OpenBLAS's. An
// FP8_NUM_THREADS in the environment may only make them smaller: a rank never runs more
// compute threads than the cores the job reserved for it. `preset`: FP8_NUM_THREADS as
// main() found it (0: not set). Before the first kernel runs.
void size_thread_pools(int cpus, int preset) {
  if (cpus <= 0) {
    if (preset > 0) fp8::cpu::set_num_threads(preset);
    return;
  }
  const int threads = preset > 0 ? std::min(cpus, preset) : cpus;
  fp8::cpu::set_num_threads(threads);
  openblas_set_num_threads(threads);
}

// The GPU switches in the environment: FP8_CUDA_ATTENTION picks the attention kernels
// (scripts/gpu/run.sh sets it where a machine's wgmma tests failed); FP8_NCCL_HOST_WAIT=1
// makes every NCCL collective wait on the host instead of being queued on the device.
struct CudaSwitches {
  fp8::CudaModelOpsOptions model_ops;
  bool nccl_host_wait = false;
};

absl::StatusOr<CudaSwitches> read_cuda_switches() {
  auto env = [](const char* name) -> std::string_view {
    const char* e = std::getenv(name);
    return e != nullptr ? e : "";
  };
  CudaSwitches switches;
  absl::StatusOr<fp8::CudaModelOpsOptions::Attention> attention =
      fp8::parse_cuda_attention_kernels(env("FP8_CUDA_ATTENTION"));
  if (!attention.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8_CUDA_ATTENTION in the environment: ", attention.status().message()));
  }
  switches.model_ops.attention = *attention;
  const std::string_view host_wait = env("FP8_NCCL_HOST_WAIT");
  if (!host_wait.empty() && host_wait != "0" && host_wait != "1") {
    return absl::InvalidArgumentError("FP8_NCCL_HOST_WAIT in the environment: expected 0 or 1");
  }
  switches.nccl_host_wait = host_wait == "1";
  return switches;
}

// A fresh run in a directory holding another run's checkpoints would interleave the two
// (retention could even delete the new run's checkpoints as older than the old run's), and
// a later --resume would pick whichever is newest.
absl::Status refuse_to_overwrite(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<fp8::checkpoint::CheckpointEntry>> found = fp8::checkpoint::list_checkpoints(dir);
  if (!found.ok()) return found.status();
  for (const fp8::checkpoint::CheckpointEntry& e : *found) {  // newest first
    if (e.state != fp8::checkpoint::CheckpointState::kCommitted) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint.dir ", dir, " already holds checkpoints (newest: step ", e.step,
                     "); continue that run with --resume, or give this one another checkpoint.dir"));
  }
  return absl::OkStatus();
}

// Coordinator mode's flags, and the token from the environment.
struct CoordinatorFlags {
  std::string address;  // empty: not in coordinator mode
  std::string job_id;
  int attempt = 0;
  std::string rendezvous_namespace;
  std::string ca_file;
  std::string token;
  // The roots the job's paths were admitted under (confined_paths.h); empty: none.
  std::string data_root;
  std::string checkpoint_root;
};

constexpr char kTokenVariable[] = "FP8_TRAINER_TOKEN";

absl::StatusOr<std::string> read_token() {
  const char* token = std::getenv(kTokenVariable);
  if (token == nullptr || *token == '\0') {
    return absl::InvalidArgumentError(absl::StrCat("--coordinator needs the attempt's trainer token in the environment "
                                                   "variable ", kTokenVariable,
                                                   " (never on the command line, where ps shows it)"));
  }
  return std::string(token);
}

// The channel every coordinator call of this rank shares: TLS with the CA in
// --coordinator-ca, plaintext without it.
absl::StatusOr<std::shared_ptr<grpc::Channel>> connect_coordinator(const CoordinatorFlags& c) {
  return fp8::rpc::coordinator_channel(c.address, c.ca_file);
}

// The store the ranks meet through: the coordinator's rendezvous in coordinator mode, a
// file store in the rendezvous directory otherwise.
absl::StatusOr<std::unique_ptr<fp8::engine::collectives::KeyValueStore>> open_store(
    const CoordinatorFlags& c, const std::shared_ptr<grpc::Channel>& channel, const std::string& rendezvous_dir,
    double timeout_s) {
  if (channel == nullptr) {
    absl::StatusOr<std::unique_ptr<fp8::engine::collectives::FileStore>> store =
        fp8::engine::collectives::FileStore::open(rendezvous_dir);
    if (!store.ok()) return store.status();
    return std::unique_ptr<fp8::engine::collectives::KeyValueStore>(std::move(*store));
  }
  fp8::train_cli::CoordinatorStoreOptions options;
  options.address = c.address;
  options.rendezvous_namespace = c.rendezvous_namespace;
  options.token = c.token;
  options.retry_window = absl::Seconds(timeout_s);
  return std::unique_ptr<fp8::engine::collectives::KeyValueStore>(
      std::make_unique<fp8::train_cli::CoordinatorStore>(channel, std::move(options)));
}

// Reports to the coordinator, wrapping the rank's own observer; raises g_stop when the
// coordinator ends the attempt.
std::unique_ptr<fp8::train_cli::CoordinatorReporter> make_reporter(const CoordinatorFlags& c,
                                                                   const std::shared_ptr<grpc::Channel>& channel,
                                                                   int rank, int world_size, int tensor_parallel,
                                                                   const fp8::train_cli::ConfinedJobPaths& paths,
                                                                   double flops_per_token,
                                                                   const fp8::train_cli::DevicePeak& peak,
                                                                   fp8::engine::TrainObserver& inner) {
  fp8::train_cli::CoordinatorReporterOptions options;
  options.address = c.address;
  options.token = c.token;
  options.job_id = c.job_id;
  options.attempt = c.attempt;
  options.rank = rank;
  options.world_size = world_size;
  options.tensor_parallel = tensor_parallel;
  options.checkpoint_dir = paths.checkpoint_dir;
  options.checkpoint_alias = paths.checkpoint_alias;
  options.flops_per_token = flops_per_token;
  options.peak_flops_per_second = peak.flops_per_second;
  return std::make_unique<fp8::train_cli::CoordinatorReporter>(channel, std::move(options), inner, &g_stop);
}

// The ranks' process group: NCCL between GPUs, Gloo (TCP) between CPU processes.
// `prefix`: the group's keys in the store, for the groups of a mesh (engine/train/mesh.h).
absl::StatusOr<std::unique_ptr<fp8::engine::collectives::ProcessGroup>> join_group(
    fp8::engine::collectives::KeyValueStore& store, const fp8::engine::Device& device, int rank, int world_size,
    double timeout_s, const std::string& listen, bool nccl_host_wait, const std::string& prefix = "") {
  fp8::engine::collectives::ProcessGroupOptions options;
  options.timeout = absl::Seconds(timeout_s);
  options.prefix = prefix;
  if (!device.is_cuda()) return fp8::engine::collectives::make_gloo_process_group(store, rank, world_size, options, listen);
#ifdef FP8_HAVE_NCCL
  // NCCL gets a stream of its own, so collectives overlap the device's compute stream; FSDP
  // queues them behind the compute that produced their inputs and makes the compute stream
  // wait for them where it reads the results, with events: the host waits for neither.
  // Without the compute stream every collective waits on the host.
  return fp8::engine::collectives::make_nccl_process_group(
      store, rank, world_size, options, device.ordinal(),
      /*stream=*/nullptr, /*compute_stream=*/nccl_host_wait ? nullptr : device.stream());
#else
  return absl::UnimplementedError(
      "resources.device cuda with several ranks needs NCCL, which this build does not have (NCCL was not found "
      "next to the CUDA toolkit at configure time)");
#endif
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
  int cuda_device = 0;
  CoordinatorFlags coord;
  app.add_option("--config", config, "the job file (job.yaml)")->required();
  app.add_flag("--resume", resume, "continue from the newest good checkpoint in checkpoint.dir");
  bool estimate = false;
  app.add_flag("--estimate", estimate,
               "print the memory a rank of this job needs, by part, and exit without training");
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
  app.add_option("--cuda-device", cuda_device, "the GPU this rank trains on when resources.device is cuda")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text or json (one object per line, for log collectors)")
      ->capture_default_str();
  auto* coord_opt = app.add_option("--coordinator", coord.address,
                                   "HOST:PORT of the coordinator: meet and report there (the worker daemon's mode)");
  auto* job_opt = app.add_option("--job-id", coord.job_id, "coordinator mode: the job (\"job-7\")");
  auto* attempt_opt =
      app.add_option("--attempt", coord.attempt, "coordinator mode: the attempt number")->check(CLI::PositiveNumber);
  auto* ns_opt = app.add_option("--rendezvous-namespace", coord.rendezvous_namespace,
                                "coordinator mode: the attempt's rendezvous namespace (\"job-7/attempt-2/\")");
  auto* ca_opt = app.add_option("--coordinator-ca", coord.ca_file,
                                "coordinator mode: PEM file of the CA to trust; makes the channel TLS");
  auto* data_root_opt = app.add_option("--data-root", coord.data_root,
                                       "coordinator mode: open data.path beneath this folder, following no link");
  auto* checkpoint_root_opt =
      app.add_option("--checkpoint-root", coord.checkpoint_root,
                     "coordinator mode: write checkpoint.dir beneath this folder, following no link");
  world_opt->needs(rank_opt);
  rdzv_opt->needs(rank_opt);
  rank_opt->needs(world_opt);
  nproc_opt->excludes(rank_opt);
  coord_opt->needs(rank_opt, world_opt, job_opt, attempt_opt, ns_opt);
  coord_opt->excludes(rdzv_opt, nproc_opt);
  for (CLI::Option* o : {job_opt, attempt_opt, ns_opt, ca_opt, data_root_opt, checkpoint_root_opt}) o->needs(coord_opt);
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
  const bool coordinated = coord_opt->count() > 0;
  if (joining && !coordinated && rdzv_opt->count() == 0) {
    std::fprintf(stderr, "fp8-train: --rank needs --rendezvous DIR or --coordinator HOST:PORT\n");
    return 2;
  }
  if (joining) g_who = "fp8-train [rank " + std::to_string(rank) + "]";
  // The training log goes to stdout, as a CLI's output, and the other ranks' (their
  // warnings) to stderr; refusals of bad input stay plain messages on stderr (fail).
  absl::StatusOr<fp8::log::Format> format = fp8::log::parse_format(log_format);
  if (!format.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("--", format.status().message())), 2);
  fp8::log::install({.component = "fp8-train",
                     .format = *format,
                     .rank = joining ? std::optional<int>(rank) : std::nullopt,
                     .to_stdout = !joining || rank == 0});
  std::shared_ptr<grpc::Channel> channel;  // coordinator mode only
  if (coordinated) {
    // A worker daemon killed outright cannot stop its ranks: the kernel does it for it.
    // SIGTERM stops this rank as a signal would, and its peers, which agree on stopping
    // in the per-step all-reduce, stop and checkpoint after the same step.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    absl::StatusOr<std::string> token = read_token();
    if (!token.ok()) return fail(token.status(), 2);
    coord.token = std::move(*token);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> connected = connect_coordinator(coord);
    if (!connected.ok()) return fail(connected.status(), 2);
    channel = std::move(*connected);
  }
  std::vector<std::string> all_overrides = overrides;
  if (nproc > 0) all_overrides.push_back("resources.world_size=" + std::to_string(nproc));
  if (joining) all_overrides.push_back("resources.world_size=" + std::to_string(world_size));

  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::load_job_spec_file(config, all_overrides);
  if (!spec.ok()) return fail(spec.status(), 2);
  if (estimate) {
    absl::StatusOr<fp8::jobspec::MemoryEstimate> e = fp8::jobspec::estimate_rank_memory(*spec);
    if (!e.ok()) return fail(e.status(), 2);
    std::fputs(fp8::jobspec::format_memory_estimate(*e).c_str(), stdout);
    return 0;
  }
  const int job_world = spec->resources().world_size();
  if (job_world > 1 && !joining && nproc == 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
                    config, ": resources.world_size is ", job_world, ": run it with --nproc ", job_world,
                    ", or start each rank with --rank R --world-size ", job_world, " --rendezvous DIR")),
                2);
  }
  if (!coordinated && !spec->fp8().amax_init_from().empty()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
                    config, ": fp8.amax_init_from: the histories it names are kept by the coordinator; submit the "
                            "job with fp8ctl submit, or leave the field out to run it here")),
                2);
  }
  if (!resume && (!joining || rank == 0)) {
    if (absl::Status s = refuse_to_overwrite(spec->checkpoint().dir()); !s.ok()) return fail(s, 2);
  }
  fp8::engine::TrainerOptions trainer_options;
  if (const char* e = std::getenv("FP8_FSDP_COLLECTIVES"); e != nullptr) {
    absl::StatusOr<fp8::engine::fsdp::UnitCollectives> collectives =
        fp8::engine::fsdp::parse_unit_collectives(e, "FP8_FSDP_COLLECTIVES in the environment");
    if (!collectives.ok()) return fail(collectives.status(), 2);
    trainer_options.collectives = *collectives;
  }
  absl::StatusOr<CudaSwitches> cuda_switches = read_cuda_switches();
  if (!cuda_switches.ok()) return fail(cuda_switches.status(), 2);
  const std::string checkpoint_dir = spec->checkpoint().dir();  // as the job names it, for messages
  absl::StatusOr<fp8::train_cli::ConfinedJobPaths> paths =
      fp8::train_cli::confine_job_paths(*spec, coord.data_root, coord.checkpoint_root);
  if (!paths.ok()) return fail(paths.status(), 2);
  trainer_options.data_files = paths->data_files;
  trainer_options.init_from_follow_links = !paths->init_from_confined;
  if (nproc > 1) {
    fp8::train_cli::LocalLaunch launch;
    launch.nproc = nproc;
    launch.rank_args = {"--config", config, "--timeout", std::to_string(timeout_s), "--log-format", log_format};
    launch.one_gpu_per_rank = spec->resources().device() == fp8::v1::ResourceSpec::CUDA;
    if (resume) launch.rank_args.push_back("--resume");
    for (const std::string& o : overrides) {
      launch.rank_args.push_back("--set");
      launch.rank_args.push_back(o);
    }
    return fp8::train_cli::run_local_ranks(launch);
  }
  const char* preset_threads = std::getenv("FP8_NUM_THREADS");
  size_thread_pools(spec->resources().cpus_per_rank(), preset_threads != nullptr ? std::atoi(preset_threads) : 0);

  std::unique_ptr<fp8::engine::Device> cuda;
  const fp8::engine::Device* device = &fp8::engine::Device::cpu();
  if (spec->resources().device() == fp8::v1::ResourceSpec::CUDA) {
    absl::StatusOr<std::unique_ptr<fp8::engine::Device>> d = fp8::engine::Device::cuda(cuda_device, cuda_switches->model_ops);
    if (!d.ok()) return fail(d.status());
    cuda = std::move(*d);
    device = cuda.get();
  }

  // Under FSDP, the ranks meet through a file store in the rendezvous directory, or the
  // coordinator's rendezvous. A coordinated job of one rank needs no group.
  std::unique_ptr<fp8::engine::collectives::ProcessGroup> group;
  std::unique_ptr<fp8::engine::collectives::KeyValueStore> store;  // outlives the group
  if (joining && (!coordinated || world_size > 1)) {
    absl::StatusOr<std::unique_ptr<fp8::engine::collectives::KeyValueStore>> opened =
        open_store(coord, channel, rendezvous, timeout_s);
    if (!opened.ok()) return fail(opened.status());
    store = std::move(*opened);
    absl::StatusOr<std::unique_ptr<fp8::engine::collectives::ProcessGroup>> joined =
        join_group(*store, *device, rank, world_size, timeout_s, listen, cuda_switches->nccl_host_wait);
    if (!joined.ok()) return fail(joined.status());
    group = std::move(*joined);
    // Data parallelism beside tensor parallelism: the trainer forms the mesh's two groups
    // through the same rendezvous.
    trainer_options.make_group = [&, nccl_host_wait = cuda_switches->nccl_host_wait](
                                     int group_rank, int group_size, const std::string& prefix) {
      return join_group(*store, *device, group_rank, group_size, timeout_s, listen, nccl_host_wait, prefix);
    };
  }

  absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> trainer =
      fp8::engine::Trainer::create(*spec, *device, group.get(), trainer_options);
  if (!trainer.ok()) return fail(trainer.status());
  fp8::train_cli::ConsoleObserver console;
  OtherRankObserver quiet;
  fp8::engine::TrainObserver& local = rank <= 0 ? static_cast<fp8::engine::TrainObserver&>(console) : quiet;
  std::unique_ptr<fp8::train_cli::CoordinatorReporter> reporter;
  if (coordinated) {
    // Measured once the thread pools have their size: the CPU's peak is an sgemm's on them.
    const fp8::train_cli::DevicePeak peak = fp8::train_cli::device_peak(*spec, *device);
    const double flops_per_token = fp8::jobspec::training_flops_per_token(*spec);
    if (rank <= 0 && peak.flops_per_second > 0) {
      const int tensor = std::max(1, spec->parallel().tensor());
      fp8::log::info(absl::StrFormat("mfu: %.3g model FLOPs a token%s, against a peak of %.4g TFLOP/s a rank (%s)",
                                     flops_per_token,
                                     tensor > 1 ? absl::StrCat(", 1/", tensor, " of them a tensor-parallel rank's")
                                                : std::string(),
                                     peak.flops_per_second / 1e12, peak.basis));
    }
    reporter = make_reporter(coord, channel, std::max(rank, 0), job_world, spec->parallel().tensor(), *paths,
                             flops_per_token, peak, local);
  }
  fp8::engine::TrainObserver& observer = reporter ? static_cast<fp8::engine::TrainObserver&>(*reporter) : local;
  int64_t resumed_step = 0;
  if (resume) {
    absl::StatusOr<int64_t> from = (*trainer)->resume(observer);
    if (!from.ok()) return fail(from.status());
    resumed_step = *from;
    if (*from == 0 && rank <= 0) {
      fp8::log::info(absl::StrCat("no good checkpoint in ", checkpoint_dir, ": starting from step 1"));
    }
  }
  if (reporter) reporter->set_resumed_from_step(resumed_step);
  // A restarted attempt picks up its job's histories; a first one those of the job it
  // warm-starts from (fp8.amax_init_from).
  if (coordinated && (coord.attempt > 1 || !spec->fp8().amax_init_from().empty())) {
    fp8::train_cli::AmaxResumeRequest amax{coord.token, {}, resumed_step};
    amax.caller.set_job_id(coord.job_id);
    amax.caller.set_attempt(coord.attempt);
    amax.caller.set_rank(std::max(rank, 0));
    std::unique_ptr<fp8::v1::TrainerService::Stub> stub = fp8::v1::TrainerService::NewStub(channel);
    absl::StatusOr<std::string> line = fp8::train_cli::resume_amax_histories(*stub, amax, (*trainer)->model());
    if (!line.ok()) return fail(line.status());
    if (!line->empty() && rank <= 0) fp8::log::info(*line);
  }

  // g_stop is also raised by the reporter when the coordinator ends the attempt. A signal the
  // parent set to be ignored (a shell's background job ignores SIGINT) stays
  // ignored.
  for (int sig : {SIGINT, SIGTERM}) {
    if (std::signal(sig, on_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
  }
  fp8::engine::RunControl control;
  control.stop = &g_stop;
  absl::StatusOr<fp8::engine::TrainSummary> summary = (*trainer)->run(observer, control);
  if (reporter && reporter->attempt_ended() && (!summary.ok() || summary->stopped_early)) {
    if (!summary.ok()) fail(summary.status());
    return fail(absl::AbortedError("the coordinator ended this attempt"));
  }
  if (!summary.ok()) return fail(summary.status());
  return summary->stopped_early ? 130 : 0;
}
