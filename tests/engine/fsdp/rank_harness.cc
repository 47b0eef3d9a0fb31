#include "tests/engine/fsdp/rank_harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"
#ifdef FP8_HAVE_NCCL
#include "worker/engine/collectives/nccl/nccl_process_group.h"
#endif
#ifdef FP8_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#include "worker/engine/tensor/device.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {

namespace {

class FileObserver final : public TrainObserver {
 public:
  FileObserver(std::FILE* out, int rank, const RunOptions& o, const Device& device, std::atomic<bool>& stop)
      : out_(out), rank_(rank), options_(o), device_(device), stop_(stop) {}
  void on_step_start(int64_t step) override {
    if (rank_ == options_.stop_rank && step == options_.stop_at_step) stop_.store(true);
  }
  void on_step(const StepReport& r) override {
    StepComm c = r.comm.value_or(StepComm{});
    // What stays allocated between steps: read here, right after the step.
    const double in_use = static_cast<double>(device_.backend().memory_stats().allocated);
    std::fprintf(out_, "step %lld %a %a %a %a %a %a %a %a %a %a %a %a %a %a %a\n", static_cast<long long>(r.step), r.loss,
                 r.grad_norm, c.all_gather_fp8_bytes, c.all_gather_f32_bytes, c.all_gather_bf16_bytes,
                 c.reduce_scatter_f32_bytes, c.reduce_scatter_bf16_bytes, c.all_reduces, c.weight_scale_all_reduces,
                 static_cast<double>(r.peak_memory_bytes), in_use, c.tensor_all_reduces, c.tensor_all_reduce_bytes,
                 c.sequence_gather_fp8_bytes, c.sequence_gather_bytes);
    std::fflush(out_);
    if (rank_ == options_.kill_rank && r.step == options_.kill_at_step) raise(SIGKILL);
    if (rank_ == options_.stall_rank && r.step == options_.stall_at_step) raise(SIGSTOP);
  }
  void on_cast_numerics(int64_t step, const std::vector<CastNumericsRecord>& casts) override {
    for (const CastNumericsRecord& c : casts) {
      std::fprintf(out_, "cast %lld %s %s %a %a\n", static_cast<long long>(step), c.layer.c_str(), c.tensor.c_str(),
                   static_cast<double>(c.amax), static_cast<double>(c.scale));
    }
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  int rank_;
  RunOptions options_;
  const Device& device_;
  std::atomic<bool>& stop_;
};

absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> join_group(collectives::KeyValueStore& store, const RunOptions& o,
                                                              int rank, const Device& device, int size = 0,
                                                              const std::string& prefix = "") {
  collectives::ProcessGroupOptions po;
  po.timeout = absl::Seconds(o.timeout_seconds);
  po.prefix = prefix;
  if (size == 0) size = o.world_size;
  if (!o.cuda) return collectives::make_gloo_process_group(store, rank, size, po);
#ifdef FP8_HAVE_NCCL
  // Queued on the device as fp8-train's ranks are (the compute stream given), unless the
  // options ask for host waits.
  return collectives::make_nccl_process_group(store, rank, size, po, device.ordinal(), nullptr,
                                              o.nccl_host_wait ? nullptr : device.stream());
#else
  (void)device;
  return absl::UnavailableError("this build has no NCCL");
#endif
}

absl::Status train_rank(const v1::JobSpec& spec, const RunOptions& o, int rank, const std::filesystem::path& rdzv,
                       std::FILE* out) {
  std::unique_ptr<Device> gpu;
  const Device* device = &Device::cpu();
  if (o.cuda) {
    absl::StatusOr<std::unique_ptr<Device>> d = Device::cuda(rank);
    if (!d.ok()) return d.status();
    gpu = std::move(*d);
    device = gpu.get();
  }
  std::unique_ptr<collectives::ProcessGroup> group;
  std::unique_ptr<collectives::FileStore> store;
  TrainerOptions trainer_options;
  if (o.world_size > 0) {
    absl::StatusOr<std::unique_ptr<collectives::FileStore>> opened = collectives::FileStore::open(rdzv);
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
    absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> g = join_group(*store, o, rank, *device);
    if (!g.ok()) return g.status();
    group = std::move(*g);
    // A mesh's groups meet through the same store.
    trainer_options.make_group = [&](int r, int n, const std::string& prefix) {
      return join_group(*store, o, r, *device, n, prefix);
    };
  }
  v1::JobSpec s = spec;
  s.mutable_resources()->set_world_size(o.world_size > 0 ? o.world_size : 1);
  trainer_options.collectives = o.collectives;
  // What creating the trainer (model, shards, optimizer) holds at most, beyond what the
  // process held before.
  Backend& backend = device->backend();
  const int64_t held_before = backend.memory_stats().allocated;
  backend.reset_peak_memory();
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(s, *device, group.get(), trainer_options);
  if (!t.ok()) return t.status();
  std::fprintf(out, "startup %lld\n", static_cast<long long>(backend.memory_stats().peak_allocated - held_before));
  std::atomic<bool> stop{false};
  FileObserver observer(out, rank, o, *device, stop);
  if (o.resume) {
    absl::StatusOr<int64_t> from = (*t)->resume(observer);
    if (!from.ok()) return from.status();
  }
  RunControl control;
  control.stop_after_step = o.stop_after_step;
  control.stop = &stop;
  absl::StatusOr<TrainSummary> summary = (*t)->run(observer, control);
  return summary.status();
}

[[noreturn]] void rank_main(const v1::JobSpec& spec, const RunOptions& o, int rank, const std::filesystem::path& rdzv,
                           const std::filesystem::path& result) {
  fp8::cpu::set_num_threads(1);  // each of the forked ranks computes on one thread
  std::FILE* out = std::fopen(result.c_str(), "w");
  if (out == nullptr) _exit(3);
  const absl::Status s = train_rank(spec, o, rank, rdzv, out);
  if (s.ok()) {
    std::fprintf(out, "ok\n");
  } else {
    std::string msg(s.message());
    for (char& c : msg) c = c == '\n' ? ' ' : c;
    std::fprintf(out, "error %s\n", msg.c_str());
  }
  std::fclose(out);
  _exit(s.ok() ? 0 : 1);
}

void read_result(const std::filesystem::path& file, RankOutcome& r) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("step ", 0) == 0) {
      StepRecord s;
      long long step = 0;
      double v[15] = {};
      if (std::sscanf(line.c_str(), "step %lld %la %la %la %la %la %la %la %la %la %la %la %la %la %la %la", &step,
                      &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12],
                      &v[13], &v[14]) == 16) {
        s.step = step;
        s.loss = v[0];
        s.grad_norm = v[1];
        s.all_gather_fp8_bytes = v[2];
        s.all_gather_f32_bytes = v[3];
        s.all_gather_bf16_bytes = v[4];
        s.reduce_scatter_f32_bytes = v[5];
        s.reduce_scatter_bf16_bytes = v[6];
        s.all_reduces = v[7];
        s.weight_scale_all_reduces = v[8];
        s.peak_memory_bytes = v[9];
        s.memory_in_use_after = v[10];
        s.tensor_all_reduces = v[11];
        s.tensor_all_reduce_bytes = v[12];
        s.sequence_gather_fp8_bytes = v[13];
        s.sequence_gather_bytes = v[14];
        r.steps.push_back(s);
      }
    } else if (line.rfind("cast ", 0) == 0) {
      CastRecord c;
      long long step = 0;
      char layer[128] = {}, tensor[32] = {};
      double amax = 0, scale = 0;
      if (std::sscanf(line.c_str(), "cast %lld %127s %31s %la %la", &step, layer, tensor, &amax, &scale) == 5) {
        c.step = step;
        c.layer = layer;
        c.tensor = tensor;
        c.amax = static_cast<float>(amax);
        c.scale = static_cast<float>(scale);
        r.casts.push_back(c);
      }
    } else if (line.rfind("startup ", 0) == 0) {
      r.startup_peak_bytes = std::stod(line.substr(8));
    } else if (line == "ok") {
      r.ok = true;
    } else if (line.rfind("error ", 0) == 0) {
      r.error = line.substr(6);
    }
  }
}

}  // namespace

int cuda_device_count() {
#ifdef FP8_HAVE_CUDA
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n < 0 ? 0 : n > 100 ? 100 : n);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
#else
  return 0;
#endif
}

std::vector<RankOutcome> run_ranks(const v1::JobSpec& spec, const RunOptions& options,
                                  const std::filesystem::path& scratch) {
  static int run_counter = 0;
  const std::filesystem::path dir = scratch / absl::StrCat("run-", ++run_counter);
  const std::filesystem::path rdzv = dir / "rendezvous";
  std::filesystem::create_directories(rdzv);
  const int processes = options.world_size > 0 ? options.world_size : 1;
  std::vector<pid_t> pids(static_cast<size_t>(processes), -1);
  std::vector<RankOutcome> out(static_cast<size_t>(processes));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  std::fflush(nullptr);  // nothing buffered is written twice
  for (int r = 0; r < processes; ++r) {
    const pid_t pid = fork();
    if (pid == 0) rank_main(spec, options, r, rdzv, dir / absl::StrCat("rank-", r, ".txt"));
    pids[static_cast<size_t>(r)] = pid;
  }
  int left = processes;
  const auto deadline = start + std::chrono::duration<double>(options.deadline_seconds);
  while (left > 0) {
    for (int r = 0; r < processes; ++r) {
      pid_t& pid = pids[static_cast<size_t>(r)];
      if (pid <= 0) continue;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != pid) continue;
      RankOutcome& o = out[static_cast<size_t>(r)];
      o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      o.exited = WIFEXITED(status);
      o.exit_code = o.exited ? WEXITSTATUS(status) : -1;
      o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      pid = -1;
      --left;
    }
    if (left == 0) break;
    const bool only_stalled_left = options.stall_rank >= 0 && options.stall_rank < processes && left == 1 &&
                                   pids[static_cast<size_t>(options.stall_rank)] > 0;
    if (only_stalled_left || Clock::now() > deadline) {
      for (pid_t& pid : pids) {
        if (pid > 0) {
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          pid = -1;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < processes; ++r) read_result(dir / absl::StrCat("rank-", r, ".txt"), out[static_cast<size_t>(r)]);
  return out;
}

::testing::AssertionResult all_ok(const std::vector<RankOutcome>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].ok) {
      return ::testing::AssertionFailure() << "rank " << r << " failed: " << ranks[r].error << " (exit "
                                           << ranks[r].exit_code << ", signal " << ranks[r].signal << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fp8::engine::testing
