// bench_train: training throughput (tokens/s) of a small Llama per fp8 recipe, through
// the real training loop (Trainer: data, forward, backward, fp8 scaling, grad clipping,
// AdamW), side by side with the high-precision baseline (recipe none).
//
// Every recipe gets its own trainer on the same job; the trainers then take turns, a few
// steps each per round, so that drifts in the machine's speed hit all of them alike. The
// first round is warm-up and not counted. Also printed: the model FLOPs each run
// achieves (6 · parameters + attention, per token) against the machine's fp32 peak.
//
//   bench_train [--config examples/jobs/tiny-cpu.yaml] [--set model.dim=256 ...]
//               [--rounds 6] [--steps 5] [--csv FILE]
//   bench_train --nproc N [--all-gather-fp8 both|on|off] [--timeout 300] [...as above]
//
// With --nproc: FSDP over N local ranks (forked processes, Gloo over 127.0.0.1, meeting
// through a file store), on the job's recipe (tiny-cpu.yaml: tensorwise), with fp8
// all-gather of the weights on and off side by side. Every rank builds one trainer per
// setting, each on its own process group, and the trainers take turns as above; a round's
// time is the slowest rank's. Printed per setting: global tokens/s (batch_size is per rank,
// so N x batch_size x seq_len tokens per step), ms/step, the communication per step as
// FSDP counts it (collectives' time on the communication thread, and the part of it the
// compute thread waited for: "exposed"; both the mean over ranks) and the all-gather
// bytes by the type that travelled. Each rank's kernels and OpenBLAS get max(1, cores / N)
// threads (FP8_NUM_THREADS, unless it is set already).
//
// On a CPU every fp8 recipe costs more than fp32: fp8 is emulated there (casts in
// software, GEMMs on widened values), so this measures the emulation's overhead; the
// speed-up fp8 exists for is on a GPU's tensor cores (bench_gemm --device cuda).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/local_ranks.h"
#include "common/jobspec/loader.h"
#include "worker/engine/dist/file_store.h"
#include "worker/engine/dist/gloo_process_group.h"
#include "worker/engine/train/trainer.h"
#include "worker/fp8_train/blas_environment.h"

namespace {

using fp8::bench::fmt;

struct Contender {
  std::string recipe;
  std::unique_ptr<fp8::engine::Trainer> trainer;
  double seconds = 0;
  int64_t steps = 0;
};

// Forward + backward FLOPs per token: 6 per parameter in a linear (2 forward, 4
// backward), plus attention's two [seq, seq] products (causal: half of them), ×3 for the
// backward. The embedding lookup is free.
double flops_per_token(const fp8::engine::LlamaConfig& c, int64_t seq) {
  // Everything but the norm gains and the embedding lookup (which, tied, is also the
  // output projection and stays counted).
  const int64_t lookup = c.tie_embeddings ? 0 : c.vocab_size * c.dim;
  const double linear_params = static_cast<double>(c.parameter_count() - lookup - c.dim * (2 * c.n_layers + 1));
  const double attention = 3.0 * 2.0 * 2.0 * static_cast<double>(c.n_layers * seq * c.dim) / 2.0;
  return 6.0 * linear_params + attention;
}

class Quiet final : public fp8::engine::TrainObserver {};

// What both modes take from the command line.
struct Common {
  std::string config = FP8_EXAMPLE_JOB;
  std::vector<std::string> overrides;
  int rounds = 6;
  int steps_per_round = 5;
  std::string csv;
};

// The job with the benchmark's settings on top of the user's overrides.
fp8::v1::JobSpec load_job(const Common& c, const std::vector<std::string>& extra, int64_t total_steps) {
  std::vector<std::string> o = c.overrides;
  o.insert(o.end(), extra.begin(), extra.end());
  o.push_back(absl::StrCat("train.steps=", total_steps));
  o.push_back("train.eval_every=0");
  o.push_back("train.warmup_steps=0");  // the schedule does not change a step's cost; short runs need this
  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::LoadJobSpecFile(c.config, o);
  fp8::bench::check(spec.status(), "loading the job");
  spec->mutable_checkpoint()->clear_dir();  // a benchmark writes no checkpoints
  return *spec;
}

// One process, every recipe: the original benchmark.
int single_process(const Common& opts) {
  const std::vector<std::string> recipes = {"none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"};
  const int rounds = opts.rounds, steps_per_round = opts.steps_per_round;
  const int64_t total_steps = static_cast<int64_t>(rounds + 1) * steps_per_round;
  std::vector<Contender> runs;
  for (const std::string& recipe : recipes) {
    const fp8::v1::JobSpec spec = load_job(opts, {"fp8.recipe=" + recipe}, total_steps);
    absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> t =
        fp8::engine::Trainer::create(spec, fp8::engine::Device::cpu());
    fp8::bench::check(t.status(), "building the trainer");
    runs.push_back({recipe, std::move(*t)});
  }
  const fp8::v1::JobSpec& spec = runs[0].trainer->spec();
  const int64_t tokens_per_step = spec.train().batch_size() * spec.data().seq_len();
  const fp8::engine::LlamaConfig& model = runs[0].trainer->model().config();

  Quiet quiet;
  for (int round = 0; round <= rounds; ++round) {
    for (Contender& c : runs) {
      fp8::engine::RunControl control;
      control.stop_after_step = static_cast<int64_t>(round + 1) * steps_per_round;
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<fp8::engine::TrainSummary> s = c.trainer->run(quiet, control);
      fp8::bench::check(s.status(), "training");
      if (round == 0) continue;  // warm-up
      c.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      c.steps += steps_per_round;
    }
  }

  const fp8::bench::Peaks peaks = fp8::bench::machine_peaks(fp8::cpu_backend());
  std::printf("# bench_train %s on %s (%s)\n", fp8::bench::today().c_str(), peaks.machine.c_str(),
              fp8::cpu_backend().name().c_str());
  std::printf("# model: %s; %lld tokens per step (%d x %lld); %d rounds x %d steps per recipe, interleaved\n",
              model.describe().c_str(), static_cast<long long>(tokens_per_step), spec.train().batch_size(),
              static_cast<long long>(spec.data().seq_len()), rounds, steps_per_round);
  const double fpt = flops_per_token(model, spec.data().seq_len());
  const double base_tps = static_cast<double>(runs[0].steps * tokens_per_step) / runs[0].seconds;
  fp8::bench::Table table({"recipe", "ms/step", "tokens/s", "vs none", "GFLOP/s", "% fp32 peak"});
  std::ofstream out;
  if (!opts.csv.empty()) out.open(opts.csv), out << "recipe,ms_per_step,tokens_per_s,vs_none\n";
  for (const Contender& c : runs) {
    const double ms = 1e3 * c.seconds / static_cast<double>(c.steps);
    const double tps = static_cast<double>(c.steps * tokens_per_step) / c.seconds;
    const double gflops = tps * fpt / 1e9;
    table.add({c.recipe, fmt(ms, 2), fmt(tps, 0), fmt(tps / base_tps, 2) + "x", fmt(gflops, 1),
               peaks.hp_tflops > 0 ? fmt(100 * gflops / (peaks.hp_tflops * 1e3), 1) : "?"});
    if (out) out << c.recipe << "," << ms << "," << tps << "," << tps / base_tps << "\n";
  }
  table.print();
  return 0;
}

// ---- FSDP over local ranks ---------------------------------------------------------------

// Sums one rank's per-step communication over the measured steps (train.log_every is 1, so
// every step reports).
class CommTally final : public fp8::engine::TrainObserver {
 public:
  void on_step(const fp8::engine::StepReport& r) override {
    if (!counting || !r.comm) return;
    sum.all_gather_fp8_bytes += r.comm->all_gather_fp8_bytes;
    sum.all_gather_f32_bytes += r.comm->all_gather_f32_bytes;
    sum.reduce_scatter_bytes += r.comm->reduce_scatter_bytes;
    sum.comm_ms += r.comm->comm_ms;
    sum.exposed_ms += r.comm->exposed_ms;
    ++steps;
  }
  bool counting = false;  // off during the warm-up round
  fp8::engine::StepComm sum;
  int64_t steps = 0;
};

struct FsdpContender {
  bool all_gather_fp8 = false;
  fp8::v1::JobSpec spec;
  std::unique_ptr<fp8::engine::dist::ProcessGroup> group;  // before the trainer: outlives it
  std::unique_ptr<fp8::engine::Trainer> trainer;
  CommTally tally;
  double seconds = 0;  // sum over measured rounds of the slowest rank's time
  int64_t steps = 0;
};

struct FsdpSetup {
  Common common;
  int nproc = 2;
  int threads = 1;  // per rank
  double timeout_s = 300;
  std::vector<FsdpContender> contenders;  // specs only; each rank builds the rest
};

absl::StatusOr<std::unique_ptr<fp8::engine::dist::ProcessGroup>> join(fp8::engine::dist::KeyValueStore& store,
                                                                      int rank, const FsdpSetup& setup,
                                                                      const std::string& prefix) {
  fp8::engine::dist::ProcessGroupOptions options;
  options.prefix = prefix;
  options.timeout = absl::Seconds(setup.timeout_s);
  return fp8::engine::dist::make_gloo_process_group(store, rank, setup.nproc, options);
}

void print_fsdp_results(const FsdpSetup& setup, const std::vector<FsdpContender>& runs) {
  const fp8::v1::JobSpec& spec = runs[0].trainer->spec();
  const int64_t tokens_per_step = spec.train().batch_size() * spec.data().seq_len() * setup.nproc;
  const fp8::bench::Peaks peaks = fp8::bench::machine_peaks(fp8::cpu_backend());
  std::printf("# bench_train --nproc %d, %s on %s: %d ranks x %d threads, Gloo over 127.0.0.1\n", setup.nproc,
              fp8::bench::today().c_str(), peaks.machine.c_str(), setup.nproc, setup.threads);
  std::printf("# model: %s; %s\n", runs[0].trainer->model().config().describe().c_str(),
              runs[0].trainer->fp8_summary().c_str());
  std::printf("# %lld tokens per step over all ranks (%d per rank x %lld x %d ranks); %d rounds x %d steps per "
              "setting, interleaved\n",
              static_cast<long long>(tokens_per_step), spec.train().batch_size(),
              static_cast<long long>(spec.data().seq_len()), setup.nproc, setup.common.rounds,
              setup.common.steps_per_round);
  std::printf("# comm: collectives' time on the communication thread; exposed: the compute thread waiting for "
              "them (per step, mean over ranks)\n");
  std::printf("# all-gather MB: gathered bytes per rank and step (1 MB = 1e6 B), by the type that travelled\n");
  // The baseline is fp8 all-gather off when it ran, else the only setting.
  const FsdpContender& base = runs[0];
  auto per_step = [](const FsdpContender& c, double v) { return v / static_cast<double>(c.tally.steps); };
  auto tokens_per_s = [&](const FsdpContender& c) {
    return static_cast<double>(c.steps * tokens_per_step) / c.seconds;
  };
  auto gathered = [&](const FsdpContender& c) {
    return per_step(c, c.tally.sum.all_gather_fp8_bytes + c.tally.sum.all_gather_f32_bytes);
  };
  fp8::bench::Table table({"fp8 all-gather", "ms/step", "tokens/s", "vs off", "comm ms", "exposed ms", "exposed %",
                           "AG fp8 MB", "AG fp32 MB", "AG MB vs off", "RS MB"});
  std::ofstream out;
  if (!setup.common.csv.empty()) {
    out.open(setup.common.csv);
    out << "all_gather_fp8,ms_per_step,tokens_per_s,comm_ms,exposed_ms,ag_fp8_bytes,ag_f32_bytes,rs_bytes\n";
  }
  const bool has_base = !base.all_gather_fp8;
  for (const FsdpContender& c : runs) {
    const double ms = 1e3 * c.seconds / static_cast<double>(c.steps);
    const double exposed = per_step(c, c.tally.sum.exposed_ms);
    table.add({c.all_gather_fp8 ? "on" : "off", fmt(ms, 2), fmt(tokens_per_s(c), 0),
               has_base ? fmt(tokens_per_s(c) / tokens_per_s(base), 2) + "x" : "-",
               fmt(per_step(c, c.tally.sum.comm_ms), 2), fmt(exposed, 2), fmt(100 * exposed / ms, 1),
               fmt(per_step(c, c.tally.sum.all_gather_fp8_bytes) / 1e6, 3),
               fmt(per_step(c, c.tally.sum.all_gather_f32_bytes) / 1e6, 3),
               has_base ? fmt(gathered(c) / gathered(base), 2) + "x" : "-",
               fmt(per_step(c, c.tally.sum.reduce_scatter_bytes) / 1e6, 3)});
    if (out.is_open()) {
      out << (c.all_gather_fp8 ? "on" : "off") << "," << ms << "," << tokens_per_s(c) << ","
          << per_step(c, c.tally.sum.comm_ms) << "," << exposed << ","
          << per_step(c, c.tally.sum.all_gather_fp8_bytes) << "," << per_step(c, c.tally.sum.all_gather_f32_bytes)
          << "," << per_step(c, c.tally.sum.reduce_scatter_bytes) << "\n";
    }
  }
  table.print();
}

// One rank: join, build a trainer per setting, take turns, and (rank 0) print.
absl::Status fsdp_rank(const FsdpSetup& setup, int rank, const std::filesystem::path& dir) {
  // Before any engine call: the kernels' pool reads FP8_NUM_THREADS when first used.
  setenv("FP8_NUM_THREADS", std::to_string(setup.threads).c_str(), /*overwrite=*/0);
  openblas_set_num_threads(setup.threads);

  absl::StatusOr<std::unique_ptr<fp8::engine::dist::FileStore>> store =
      fp8::engine::dist::FileStore::open(dir / "rendezvous");
  if (!store.ok()) return store.status();
  // The benchmark's own group (barriers, timings), apart from the trainers' groups so that
  // it does not show in their communication counters.
  absl::StatusOr<std::unique_ptr<fp8::engine::dist::ProcessGroup>> control = join(**store, rank, setup, "bench/");
  if (!control.ok()) return control.status();
  std::vector<FsdpContender> runs;
  runs.reserve(setup.contenders.size());
  for (const FsdpContender& c : setup.contenders) {
    FsdpContender& r = runs.emplace_back();
    r.all_gather_fp8 = c.all_gather_fp8;
    absl::StatusOr<std::unique_ptr<fp8::engine::dist::ProcessGroup>> g =
        join(**store, rank, setup, c.all_gather_fp8 ? "ag-fp8-on/" : "ag-fp8-off/");
    if (!g.ok()) return g.status();
    r.group = std::move(*g);
    absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> t =
        fp8::engine::Trainer::create(c.spec, fp8::engine::Device::cpu(), r.group.get());
    if (!t.ok()) return t.status();
    r.trainer = std::move(*t);
  }

  const int steps_per_round = setup.common.steps_per_round;
  for (int round = 0; round <= setup.common.rounds; ++round) {
    for (FsdpContender& c : runs) {
      c.tally.counting = round > 0;  // the first round warms up
      fp8::engine::RunControl rc;
      rc.stop_after_step = static_cast<int64_t>(round + 1) * steps_per_round;
      if (absl::Status s = (*control)->barrier(); !s.ok()) return s;
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<fp8::engine::TrainSummary> s = c.trainer->run(c.tally, rc);
      if (!s.ok()) return s.status();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (absl::Status m = (*control)->all_reduce(&seconds, 1, fp8::engine::dist::ReduceOp::kMax); !m.ok()) return m;
      if (round == 0) continue;
      c.seconds += seconds;
      c.steps += steps_per_round;
    }
  }
  // Every rank's communication, averaged (the bytes are the same on every rank).
  for (FsdpContender& c : runs) {
    fp8::engine::StepComm& m = c.tally.sum;
    double v[5] = {m.all_gather_fp8_bytes, m.all_gather_f32_bytes, m.reduce_scatter_bytes, m.comm_ms, m.exposed_ms};
    if (absl::Status s = (*control)->all_reduce(v, 5, fp8::engine::dist::ReduceOp::kSum); !s.ok()) return s;
    for (double& x : v) x /= setup.nproc;
    m.all_gather_fp8_bytes = v[0], m.all_gather_f32_bytes = v[1], m.reduce_scatter_bytes = v[2];
    m.comm_ms = v[3], m.exposed_ms = v[4];
  }
  if (rank == 0) print_fsdp_results(setup, runs);
  return absl::OkStatus();
}

int fsdp_ranks(const Common& c, int nproc, const std::string& all_gather_fp8, double timeout_s) {
  FsdpSetup setup;
  setup.common = c;
  setup.nproc = nproc;
  setup.timeout_s = timeout_s;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  setup.threads = std::max(1, static_cast<int>(cores) / nproc);
  if (const char* env = std::getenv("FP8_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    setup.threads = std::atoi(env);  // the user's choice stands
  }
  // Off first: it is the baseline the ratios divide by.
  std::vector<bool> settings;
  if (all_gather_fp8 != "on") settings.push_back(false);
  if (all_gather_fp8 != "off") settings.push_back(true);
  const int64_t total_steps = static_cast<int64_t>(c.rounds + 1) * c.steps_per_round;
  // Loaded (and validated) here, before the forks: a bad job fails once, not once per rank.
  for (bool on : settings) {
    FsdpContender& k = setup.contenders.emplace_back();
    k.all_gather_fp8 = on;
    k.spec = load_job(c,
                      {absl::StrCat("resources.world_size=", nproc),
                       absl::StrCat("fp8.all_gather_fp8=", on ? "true" : "false"),
                       "train.log_every=1"},
                      total_steps);
  }
  const bool ok = fp8::bench::run_local_ranks(nproc, [&](int rank, const std::filesystem::path& dir) {
    const absl::Status s = fsdp_rank(setup, rank, dir);
    if (s.ok()) return 0;
    std::fprintf(stderr, "bench_train [rank %d of %d]: %s\n", rank, nproc, std::string(s.message()).c_str());
    return 1;
  });
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  fp8::train_cli::ensure_blas_environment(argv);  // as fp8-train runs
  CLI::App app{"bench_train: training tokens/s per fp8 recipe vs the high-precision baseline"};
  Common c;
  int nproc = 0;
  std::string all_gather_fp8 = "both";
  double timeout_s = 300;
  app.add_option("--config", c.config, "the job file");
  app.add_option("--set", c.overrides, "override a field of the job, e.g. --set model.dim=256");
  app.add_option("--rounds", c.rounds, "measured rounds (one more warms up)")->check(CLI::PositiveNumber);
  app.add_option("--steps", c.steps_per_round, "steps per recipe per round")->check(CLI::PositiveNumber);
  app.add_option("--csv", c.csv, "also write the results here");
  auto* nproc_opt = app.add_option("--nproc", nproc,
                                   "FSDP over N local ranks (forked, Gloo over 127.0.0.1) on the job's recipe, "
                                   "fp8 all-gather on vs off")
                        ->check(CLI::Range(1, 64));
  app.add_option("--all-gather-fp8", all_gather_fp8, "with --nproc: which settings of fp8.all_gather_fp8 to run")
      ->check(CLI::IsMember({"both", "on", "off"}))
      ->needs(nproc_opt)
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "with --nproc: seconds the rendezvous and each collective wait for a peer")
      ->check(CLI::PositiveNumber)
      ->needs(nproc_opt)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (nproc_opt->count() > 0) return fsdp_ranks(c, nproc, all_gather_fp8, timeout_s);
  return single_process(c);
}
