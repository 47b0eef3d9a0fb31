// bench_train: training throughput (tokens/s) of a Llama per fp8 recipe, through the real
// training loop (Trainer: data, forward, backward, fp8 scaling, grad clipping, AdamW),
// side by side with the high-precision baseline (recipe none).
//
//   bench_train [--config examples/jobs/tiny-cpu.yaml] [--set model.dim=256 ...]
//               [--rounds 6] [--steps 5] [--csv FILE]
//   bench_train --device cuda [--config examples/jobs/llama-h100.yaml] [--set ...]
//               [--recipes none,tensorwise,...] [--warmup 2] [--steps 8] [--budget 420] [--csv FILE]
//   bench_train --sequential [--recipes ...] [--warmup 2] [--steps 8] [--budget 420] [...]
//   ... [--breakdown N [--breakdown-by-shape]]   (cuda, --sequential, --nproc: where a step's time goes)
//   ... [--activation-checkpointing none,full,selective]   (cuda, --sequential: each recipe in each mode)
//   bench_train --nproc N [--all-gather-fp8 both|on|off] [--timeout 300] [...as the first]
//   bench_train --device cuda --nproc N --all-gather-fp8 on|off [...]   (rank r on GPU r, NCCL)
//   bench_train --nproc N --tensor 1,2,2sp [--recipes none,tensorwise] [...]   (parallel.tensor side by side)
//
// CPU (the default): every recipe gets its own trainer on the same job; the trainers then
// take turns, a few steps each per round, so that drifts in the machine's speed hit all of
// them alike. The first round is warm-up and not counted. Also printed: the model FLOPs
// each run achieves (6 · parameters + attention, per token) against the machine's fp32
// peak.
//
// --device cuda: one GPU, one recipe at a time. Two trainers of the llama-h100 job (0.99B
// parameters: fp32 master weights, grads and AdamW moments ~16 GB, plus the bf16
// activations of an 8192-token micro-batch) need not fit in 80 GB together, so each
// recipe's trainer is built, warmed up, timed and destroyed before the next is built, and
// the device's cached memory goes back to the driver in between (each recipe's peak memory is then its own). The step time
// is the trainer's own (StepReport::step_ms: steps do not wait for the device, but the
// report of a run's last step does), over the timed steps after the first of the timed run:
// the first and last step of a run also count their fp8 casts' saturation (in the casts
// themselves, plus a read-back of the counts per cast), which makes the figures slightly
// conservative for fp8. A time
// budget bounds the whole run: each recipe gets an equal share of what is left, and its
// warm-up and timed steps stop early (the table says how many ran) when its share is spent.
// Printed per recipe: tokens/s, ms/step, the ratio to none, model TFLOP/s and MFU against
// the H100's dense bf16 and fp8 peaks, peak device memory. Recipe none is the engine's
// high-precision baseline: its GEMMs run in the job's activation type (train.compute_dtype:
// bf16 in llama-h100, so none is our bf16 training), and bench/torch_llama.py times
// PyTorch's bf16 of the same architecture.
//
// --sequential runs the CPU the same way (one recipe at a time), which is how that path is
// exercised on machines without a GPU.
//
// --activation-checkpointing (one recipe at a time): each recipe runs under each listed
// mode, and two more columns give its tokens/s and peak memory against the same recipe
// keeping every activation (list none among the modes for them).
//
// --breakdown N (one recipe at a time): after its timed steps, each recipe trains N + 2
// more with every op of the device bracketed by marks (bench/op_breakdown.h: CUDA events
// on the GPU), and a table gives each op's time per step (GEMMs, casts, attention, norms,
// the optimizer, ...) and the time between ops, recipe beside recipe. The first and last
// of those steps are left out: they count their casts' saturation, as a run's first and
// last steps do. The marks cost the GPU a little, so these steps are not the timed ones.
//
// Data: by default (--data auto) the job's corpus when the file exists, else a synthetic
// text written to a temporary file, so that nothing beyond the binary has to travel to a
// GPU machine; a step's cost does not depend on which bytes it trains on.
//
// With --nproc: FSDP over N local ranks (forked processes, Gloo over 127.0.0.1, meeting
// through a file store), on the job's recipe (tiny-cpu.yaml: tensorwise), with fp8
// all-gather of the weights on and off side by side. Every rank builds one trainer per
// setting, each on its own process group, and the trainers take turns as above; a round's
// time is the slowest rank's step time (as the trainer reports it) over every step of the
// round but its first (the round reports after its first step and its last, as one recipe
// at a time does, so a step waits for the device only there). --steps is then at least 2. With --breakdown N, after
// the rounds each setting trains N + 2 more steps and rank 0's ops are timed as above
// (every rank trains them). Printed per setting: global tokens/s (batch_size is per rank,
// so N x batch_size x seq_len tokens per step), ms/step, the communication per step as
// FSDP counts it (collectives' time on the communication thread, and the part of it the
// compute thread waited for: "exposed"; both the mean over ranks) and the all-gather
// bytes by the type that travelled. Each rank's kernels and OpenBLAS get max(1, cores / N)
// threads (FP8_NUM_THREADS, unless it is set already). With --device cuda, rank r trains
// on GPU r and the trainers' groups are NCCL in its queued mode (collectives ordered with
// the compute stream by events, as fp8-train's ranks run; comm and exposed time then come
// from those events); the benchmark's own barriers stay on Gloo. A GPU holds one setting's
// trainer at a time comfortably, so pick one with --all-gather-fp8.
//
// --nproc N --tensor LIST: one setting per parallel.tensor T in LIST (each dividing N; with
// --recipes, per recipe too) instead of the fp8 all-gather's two, side by side as above: a
// D x T mesh, D = N / T data-parallel groups (FSDP across them) of T tensor-parallel ranks.
// An entry "Tsp" (2sp) also turns on sequence parallelism (parallel.sequence). Every setting
// trains the same global batch: the job's train.batch_size is a rank's at T = 1, and each
// group of T ranks (which train the same sequences) takes T times that. fp8.all_gather_fp8 is
// --all-gather-fp8's (both: the job's) at every T, turned off where the job spec
// refuses it (at D = 1 there is nothing to gather), with the reason printed. Printed per
// setting: tokens/s and the ratio to the first, FSDP's bytes, comm and exposed ms, and the
// tensor-parallel collectives' all-reduce count, bytes (sequence parallelism's by kind) and
// time per step (on the compute thread: all exposed).
//
// On a CPU every fp8 recipe costs more than fp32: fp8 is emulated there (casts in
// software, GEMMs on widened values), so this measures the emulation's overhead; the
// speed-up fp8 exists for is on a GPU's tensor cores.
#include <cblas.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bench/bench_cuda.h"
#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "bench/local_ranks.h"
#include "bench/op_breakdown.h"
#include "common/jobspec/loader.h"
#include "kernels/cpu/parallel.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"
#ifdef FP8_HAVE_NCCL
#include "worker/engine/collectives/nccl/nccl_process_group.h"
#endif
#include "worker/engine/train/trainer.h"
#include "worker/fp8_train/blas_environment.h"

namespace {

using fp8::bench::fmt;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kAllRecipes = {"none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"};

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

// Keeps every step report (train.log_every decides how many there are).
class Recorder final : public fp8::engine::TrainObserver {
 public:
  void on_step(const fp8::engine::StepReport& r) override { reports.push_back(r); }
  int64_t peak_memory() const {
    int64_t m = 0;
    for (const auto& r : reports) m = std::max(m, r.peak_memory_bytes);
    return m;
  }
  int64_t reserved_memory() const {
    int64_t m = 0;
    for (const auto& r : reports) m = std::max(m, r.reserved_memory_bytes);
    return m;
  }
  std::vector<fp8::engine::StepReport> reports;
};

// What both modes take from the command line.
struct Common {
  std::string config;
  std::vector<std::string> overrides;
  int rounds = 6;
  int steps_per_round = 5;
  std::string csv;
  std::string data = "auto";  // auto | synthetic | job
  std::string data_path;      // set when the run trains on a synthetic corpus
};

// The job with the benchmark's settings on top of the user's overrides, or why the job
// spec refuses them.
absl::StatusOr<fp8::v1::JobSpec> try_load_job(const Common& c, const std::vector<std::string>& extra,
                                              int64_t total_steps) {
  std::vector<std::string> o = c.overrides;
  if (!c.data_path.empty()) o.push_back("data.path=" + c.data_path);
  o.insert(o.end(), extra.begin(), extra.end());
  o.push_back(absl::StrCat("train.steps=", total_steps));
  o.push_back("train.eval_every=0");    // no validation set, no evaluation in the timed steps
  o.push_back("train.warmup_steps=0");  // the schedule does not change a step's cost; short runs need this
  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::load_job_spec_file(c.config, o);
  if (spec.ok()) spec->mutable_checkpoint()->clear_dir();  // a benchmark writes no checkpoints
  return spec;
}

fp8::v1::JobSpec load_job(const Common& c, const std::vector<std::string>& extra, int64_t total_steps) {
  absl::StatusOr<fp8::v1::JobSpec> spec = try_load_job(c, extra, total_steps);
  fp8::bench::check(spec.status(), "loading the job");
  return *spec;
}

// ---- data ----------------------------------------------------------------------------------

// English-looking text (words of one to three syllables, sentences, lines), so that the
// loss falls as it would on prose; deterministic, so every run trains on the same bytes.
void write_synthetic_text(const std::filesystem::path& path, int64_t bytes) {
  static const char* kSyllables[] = {"the", "and", "ing", "ion", "ent", "for", "her", "tha", "ere", "ver", "all",
                                     "wit", "his", "ter", "est", "ers", "con", "pro", "res", "com", "per", "sta",
                                     "ted", "ble", "men", "lor", "ous", "ght", "ain", "ore", "day", "lig", "pa",
                                     "to", "in", "is", "it", "of", "on", "an", "be", "he", "we", "me", "so",
                                     "no", "go", "do", "a", "i", "o", "u", "y", "s", "t", "er"};
  constexpr int kCount = sizeof(kSyllables) / sizeof(kSyllables[0]);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state] {  // splitmix64: fast, and the same on every machine
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::string text;
  text.reserve(static_cast<size_t>(bytes) + 64);
  int words_in_sentence = 0, sentences_in_line = 0;
  bool capital = true;
  while (static_cast<int64_t>(text.size()) < bytes) {
    const uint64_t r = next();
    const int syllables = 1 + static_cast<int>(r % 3);
    for (int s = 0; s < syllables; ++s) {
      // The smaller of two draws: early syllables are the frequent ones, as in prose.
      const uint64_t q = next();
      std::string piece = kSyllables[std::min(q % kCount, (q >> 20) % kCount)];
      if (capital) piece[0] = static_cast<char>(piece[0] - 'a' + 'A'), capital = false;
      text += piece;
    }
    if (++words_in_sentence >= 6 + static_cast<int>(r >> 40) % 12) {
      text += (r >> 8) % 5 == 0 ? "?" : ".";
      words_in_sentence = 0;
      capital = true;
      text += ++sentences_in_line >= 3 ? "\n" : " ";
      if (sentences_in_line >= 3) sentences_in_line = 0;
    } else {
      text += (r >> 16) % 9 == 0 ? ", " : " ";
    }
  }
  text.resize(static_cast<size_t>(bytes));
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) fp8::bench::die("cannot write the synthetic corpus " + path.string());
}

// A temporary folder removed when the benchmark ends, by returning or through die()
// (std::exit runs no destructors, hence atexit). One per process.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp8-bench-train-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) fp8::bench::die("cannot make a temporary folder");
    path_ = tmpl;
    owned() = tmpl;
    std::atexit(remove_owned);
  }
  ~TempDir() { remove_owned(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static std::string& owned() {
    static std::string path;
    return path;
  }
  static void remove_owned() {
    if (owned().empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(owned(), ignored);
    owned().clear();
  }
  std::filesystem::path path_;
};

// Decides where the data comes from (--data), writing the synthetic corpus when needed;
// returns one line saying which, for the header.
std::string prepare_data(Common& c, std::optional<TempDir>& tmp) {
  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::load_job_spec_file(c.config, c.overrides);
  fp8::bench::check(spec.status(), "loading the job");
  const std::string job_path = spec->data().path();
  std::error_code error;
  const bool job_file = std::filesystem::is_regular_file(job_path, error);
  if (c.data == "job" || (c.data == "auto" && job_file)) return "data: the job's corpus, " + job_path;
  // Enough for the validation split (val_fraction of the file) to hold a window, and for
  // many distinct windows to train on.
  const int64_t window = spec->data().seq_len() + 1;
  const double val = spec->data().val_fraction();
  const int64_t bytes = std::max<int64_t>(8 << 20, val > 0 ? static_cast<int64_t>(4.0 * window / val) : 0);
  tmp.emplace();
  c.data_path = (tmp->path() / "synthetic.txt").string();
  write_synthetic_text(c.data_path, bytes);
  return absl::StrCat("data: synthetic text, ", bytes, " bytes (",
                      job_file ? "--data synthetic" : "no file at " + job_path,
                      ")");
}

// ---- results -------------------------------------------------------------------------------

struct Result {
  std::string recipe;
  std::string checkpointing = "none";  // train.activation_checkpointing
  std::string error;  // set when the recipe could not be built or trained
  std::optional<fp8::bench::NamedBreakdown> breakdown;  // with --breakdown
  std::string breakdown_error;  // why the profiled steps failed (the timing still stands)
  double ms_per_step = 0;
  double tokens_per_s = 0;
  int64_t steps_timed = 0;
  int64_t peak_memory = 0;
  int64_t reserved_memory = 0;
  double loss = NAN;
  double build_s = 0;
};

struct RunInfo {
  std::string device;  // "cpu", "cuda:0 (NVIDIA H100 ...)"
  fp8::bench::Peaks peaks;
  fp8::engine::LlamaConfig model;
  int64_t seq_len = 0;
  int batch_size = 0;
};

// A --recipes entry: the recipe, and the one environment variable its run sets, if any.

// The run of recipe none, when it ran and succeeded: what the ratios divide by.
const Result* baseline_of(const std::vector<Result>& results) {
  for (const Result& r : results) {
    if (r.recipe == "none" && r.checkpointing == "none" && r.error.empty()) return &r;
  }
  return nullptr;
}

// The run of r's recipe that keeps every activation, when --activation-checkpointing ran
// another mode beside it: what r's time and memory compare with.
const Result* keep_all_of(const std::vector<Result>& results, const Result& r) {
  for (const Result& k : results) {
    if (k.recipe == r.recipe && k.checkpointing == "none" && k.error.empty()) return &k;
  }
  return nullptr;
}

// "tensorwise", or "tensorwise, full" under activation checkpointing.
std::string label(const Result& r) { return r.checkpointing == "none" ? r.recipe : r.recipe + ", " + r.checkpointing; }

void write_csv(const std::string& path, const RunInfo& info, const std::vector<Result>& results) {
  std::ofstream out(path);
  if (!out) fp8::bench::die("cannot write " + path);
  const double fpt = flops_per_token(info.model, info.seq_len);
  const Result* base = baseline_of(results);
  // The model's shape travels with the figures, so that bench/torch_llama.py builds the same.
  std::string device = info.device;
  std::replace(device.begin(), device.end(), ',', ';');
  out << "recipe,ms_per_step,tokens_per_s,vs_none,model_tflops,peak_memory_bytes,reserved_memory_bytes,steps_timed,"
         "loss,error,device,dim,n_layers,n_heads,n_kv_heads,ffn_dim,vocab_size,seq_len,batch_size,rope_theta,"
         "norm_eps,tie_embeddings,flops_per_token\n";
  for (const Result& r : results) {
    const bool ok = r.error.empty();
    std::string error = r.error;
    std::replace(error.begin(), error.end(), ',', ';');
    std::replace(error.begin(), error.end(), '\n', ' ');
    const fp8::engine::LlamaConfig& m = info.model;
    out << label(r) << ",";
    if (ok) {
      out << r.ms_per_step << "," << r.tokens_per_s << ","
          << (base != nullptr ? std::to_string(r.tokens_per_s / base->tokens_per_s) : "") << ","
          << r.tokens_per_s * fpt / 1e12 << "," << (r.peak_memory > 0 ? std::to_string(r.peak_memory) : "") << ","
          << (r.reserved_memory > 0 ? std::to_string(r.reserved_memory) : "") << "," << r.steps_timed
          << "," << r.loss;
    } else {
      out << ",,,,,,,";
    }
    out << "," << error << "," << device << "," << m.dim << "," << m.n_layers << "," << m.n_heads << ","
        << m.n_kv_heads << "," << m.ffn_dim << "," << m.vocab_size << "," << info.seq_len << "," << info.batch_size
        << "," << m.rope_theta << "," << m.norm_eps << "," << (m.tie_embeddings ? 1 : 0) << "," << fpt << "\n";
  }
}

std::string gb(int64_t bytes) { return fmt(static_cast<double>(bytes) / 1e9, 2); }

// ---- CPU: every recipe in one process, interleaved ----------------------------------------

int single_process_cpu(const Common& opts, const std::vector<std::string>& recipes, const std::string& data_line) {
  const int rounds = opts.rounds, steps_per_round = opts.steps_per_round;
  const int64_t total_steps = static_cast<int64_t>(rounds + 1) * steps_per_round;
  struct Contender {
    Result result;
    std::unique_ptr<fp8::engine::Trainer> trainer;
    Recorder recorder;
    double seconds = 0;
  };
  std::vector<Contender> runs(recipes.size());
  for (size_t i = 0; i < recipes.size(); ++i) {
    const fp8::v1::JobSpec spec = load_job(opts, {"fp8.recipe=" + recipes[i]}, total_steps);
    absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> t =
        fp8::engine::Trainer::create(spec, fp8::engine::Device::cpu());
    fp8::bench::check(t.status(), "building the trainer");
    runs[i].result.recipe = recipes[i];
    runs[i].trainer = std::move(*t);
  }
  const fp8::v1::JobSpec& spec = runs[0].trainer->spec();
  const int64_t tokens_per_step = spec.train().batch_size() * spec.data().seq_len();
  RunInfo info;
  info.device = "cpu";
  info.peaks = fp8::bench::machine_peaks(fp8::cpu_backend());
  info.model = runs[0].trainer->model().config();
  info.seq_len = spec.data().seq_len();
  info.batch_size = spec.train().batch_size();

  for (int round = 0; round <= rounds; ++round) {
    for (Contender& c : runs) {
      fp8::engine::RunControl control;
      control.stop_after_step = static_cast<int64_t>(round + 1) * steps_per_round;
      const auto start = Clock::now();
      absl::StatusOr<fp8::engine::TrainSummary> s = c.trainer->run(c.recorder, control);
      fp8::bench::check(s.status(), "training");
      if (s->last_loss) c.result.loss = *s->last_loss;
      if (round == 0) continue;  // warm-up
      c.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      c.result.steps_timed += steps_per_round;
    }
  }

  std::printf("# bench_train %s on %s (%s)\n", fp8::bench::today().c_str(), info.peaks.machine.c_str(),
              fp8::cpu_backend().name().c_str());
  std::printf("# model: %s; %lld tokens per step (%d x %lld); %d rounds x %d steps per recipe, interleaved\n",
              info.model.describe().c_str(), static_cast<long long>(tokens_per_step), info.batch_size,
              static_cast<long long>(info.seq_len), rounds, steps_per_round);
  std::printf("# %s\n", data_line.c_str());
  const double fpt = flops_per_token(info.model, info.seq_len);
  std::vector<Result> results;
  // No memory figures here: the CPU backend is one per process, so its peak counts every
  // recipe's trainer at once.
  for (Contender& c : runs) {
    c.result.ms_per_step = 1e3 * c.seconds / static_cast<double>(c.result.steps_timed);
    c.result.tokens_per_s = static_cast<double>(c.result.steps_timed * tokens_per_step) / c.seconds;
    results.push_back(c.result);
  }
  // Ratios to none, or to the first recipe when none did not run.
  const Result& base = baseline_of(results) != nullptr ? *baseline_of(results) : results[0];
  const double base_tps = base.tokens_per_s;
  fp8::bench::Table table({"recipe", "ms/step", "tokens/s", "vs " + base.recipe, "GFLOP/s", "% fp32 peak"});
  for (const Result& r : results) {
    const double gflops = r.tokens_per_s * fpt / 1e9;
    table.add({r.recipe, fmt(r.ms_per_step, 2), fmt(r.tokens_per_s, 0), fmt(r.tokens_per_s / base_tps, 2) + "x",
               fmt(gflops, 1), info.peaks.hp_tflops > 0 ? fmt(100 * gflops / (info.peaks.hp_tflops * 1e3), 1) : "?"});
  }
  table.print();
  if (!opts.csv.empty()) write_csv(opts.csv, info, results);
  return 0;
}

// ---- CUDA: one recipe at a time on one GPU -------------------------------------------------

struct GpuOptions {
  int warmup = 2;
  int steps = 8;          // timed steps per recipe
  double budget_s = 420;  // the whole run, all recipes
  int breakdown = 0;      // steps profiled op by op after the timed ones (two more run unprofiled)
  bool by_shape = false;  // --breakdown-by-shape: a row per GEMM, cast and copy shape
};

// Sets `flag` at `deadline` unless destroyed first: the trainer then finishes the step in
// flight and returns (RunControl::stop).
class Deadline {
 public:
  Deadline(std::atomic<bool>& flag, Clock::time_point deadline)
      : thread_([this, &flag, deadline] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_until(lock, deadline, [this] { return done_; })) flag.store(true);
        }) {}
  ~Deadline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A device whose backend and model ops run behind the profiling wrappers of
// bench/op_breakdown.h, for --breakdown: a trainer built on it trains as on `inner`.
struct ProfiledDevice {
  ProfiledDevice(const fp8::engine::Device& inner, fp8::ModelOps& inner_ops, std::unique_ptr<fp8::bench::OpTimer> timer)
      : profiler(std::move(timer)),
        backend(inner.backend(), profiler),
        ops(inner_ops, profiler),
        device(inner.name(), &backend, &ops) {}
  fp8::bench::OpProfiler profiler;
  fp8::bench::ProfilingBackend backend;
  fp8::bench::ProfilingModelOps ops;
  fp8::engine::Device device;
};

// Turns the profiler on for the steps strictly between `first` and `last`.
class ProfileSteps final : public fp8::engine::TrainObserver {
 public:
  ProfileSteps(fp8::bench::OpProfiler& p, int64_t first, int64_t last) : p_(p), first_(first), last_(last) {}
  void on_step_start(int64_t step) override { p_.set_on(step > first_ && step < last_); }

 private:
  fp8::bench::OpProfiler& p_;
  int64_t first_, last_;
};

// Builds, warms up, times and destroys one recipe's trainer on GPU 0 (or, with
// --sequential, the CPU); errors land in the result.
Result run_one_recipe(const Common& opts, const GpuOptions& g, const std::string& recipe,
                      const std::string& checkpointing, Clock::time_point slice_end, bool cuda, RunInfo& info) {
  Result r;
  r.recipe = recipe;
  r.checkpointing = checkpointing;
  const int64_t profiled_steps = g.breakdown > 0 ? g.breakdown + 2 : 0;
  const int64_t total = g.warmup + g.steps + profiled_steps;
  // Reports (and the casts' saturation counts, which cost a pass each) only where run()
  // must: the first and last step of each run.
  const fp8::v1::JobSpec spec =
      load_job(opts,
               {"fp8.recipe=" + recipe, "train.activation_checkpointing=" + checkpointing,
                absl::StrCat("train.log_every=", total)},
               total);
  const Clock::time_point build_start = Clock::now();
  std::unique_ptr<fp8::engine::Device> gpu;  // destroyed after the trainer (declared first)
  const fp8::engine::Device* device = &fp8::bench::open_engine_device(cuda, gpu);
  if (info.device.empty()) {
    info.device = device->backend().name();
    info.peaks = fp8::bench::machine_peaks(device->backend());
  }
  std::optional<ProfiledDevice> profiled;  // destroyed after the trainer too
  if (g.breakdown > 0) {
    absl::StatusOr<fp8::ModelOps*> ops = device->model_ops();
    absl::StatusOr<std::unique_ptr<fp8::bench::OpTimer>> timer =
        cuda ? fp8::bench::cuda_op_timer(0, device->stream()) : fp8::bench::host_op_timer();
    if (!ops.ok() || !timer.ok()) {
      r.error = "profiling the device: " + std::string((ops.ok() ? timer.status() : ops.status()).message());
      return r;
    }
    profiled.emplace(*device, **ops, std::move(*timer));
    profiled->profiler.set_by_shape(g.by_shape);
    device = &profiled->device;
  }
  absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> trainer = fp8::engine::Trainer::create(spec, *device);
  if (!trainer.ok()) {
    r.error = "building the trainer: " + std::string(trainer.status().message());
    return r;
  }
  if (info.seq_len == 0) {
    info.model = (*trainer)->model().config();
    info.seq_len = spec.data().seq_len();
    info.batch_size = spec.train().batch_size();
  }
  r.build_s = seconds_between(build_start, Clock::now());

  // Warm-up: first-use allocations, cuBLASLt plans, delayed scaling's first history. At
  // most 40% of what is left of the slice (it always finishes its first step).
  std::atomic<bool> stop{false};
  Recorder warm;
  {
    const Clock::time_point now = Clock::now();
    Deadline d(stop, now + std::chrono::duration_cast<Clock::duration>((slice_end - now) * 0.4));
    fp8::engine::RunControl control;
    control.stop = &stop;
    control.stop_after_step = g.warmup;
    absl::StatusOr<fp8::engine::TrainSummary> s = (*trainer)->run(warm, control);
    if (!s.ok()) {
      r.error = "warm-up: " + std::string(s.status().message());
      return r;
    }
  }
  // Timed: at least two steps (one after the first) whatever the slice says.
  const double step_estimate_s = warm.reports.empty() ? 0 : warm.reports.back().step_ms / 1e3;
  stop.store(false);
  Recorder timed;
  {
    const Clock::time_point now = Clock::now();
    const Clock::time_point floor = now + seconds(2.5 * step_estimate_s);
    Deadline d(stop, std::max(slice_end, floor));
    fp8::engine::RunControl control;
    control.stop = &stop;
    control.stop_after_step = (*trainer)->steps_done() + g.steps;
    absl::StatusOr<fp8::engine::TrainSummary> s = (*trainer)->run(timed, control);
    if (!s.ok()) {
      r.error = "training: " + std::string(s.status().message());
      return r;
    }
    if (s->last_loss) r.loss = *s->last_loss;
  }
  // The first report covers the run's first step alone; the last one every step after it.
  if (timed.reports.empty()) {
    r.error = "no step report";
    return r;
  }
  const fp8::engine::StepReport& last = timed.reports.back();
  r.steps_timed = timed.reports.size() >= 2 ? last.step - timed.reports.front().step : 1;
  r.ms_per_step = last.step_ms;
  r.tokens_per_s = last.tokens_per_second;
  r.peak_memory = std::max(warm.peak_memory(), timed.peak_memory());
  r.reserved_memory = std::max(warm.reserved_memory(), timed.reserved_memory());
  if (profiled) {
    const int64_t first = (*trainer)->steps_done() + 1, last = first + profiled_steps - 1;
    ProfileSteps observer(profiled->profiler, first, last);
    fp8::engine::RunControl control;
    control.stop_after_step = last;
    absl::StatusOr<fp8::engine::TrainSummary> s = (*trainer)->run(observer, control);
    profiled->profiler.set_on(false);
    absl::StatusOr<fp8::bench::OpBreakdown> b = profiled->profiler.take();
    if (!s.ok() || !b.ok()) {
      r.breakdown_error = std::string((s.ok() ? b.status() : s.status()).message());
    } else {
      r.breakdown = fp8::bench::NamedBreakdown{"", *b, g.breakdown};  // named by the caller
    }
  }
  return r;
}

int one_at_a_time(const Common& opts, const GpuOptions& g, const std::vector<std::string>& recipes,
                  const std::vector<std::string>& checkpointing, const std::string& data_line, bool cuda) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + seconds(g.budget_s);
  RunInfo info;
  std::vector<Result> results;
  std::vector<std::pair<std::string, std::string>> runs;  // recipe, activation checkpointing
  for (const std::string& recipe : recipes) {
    for (const std::string& mode : checkpointing) runs.emplace_back(recipe, mode);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point slice_end = now + (deadline - now) / static_cast<int64_t>(runs.size() - i);
    Result r = run_one_recipe(opts, g, runs[i].first, runs[i].second, slice_end, cuda, info);
    // The trainer and its device are gone; hand their cached memory back before the next.
    // A failure here (a kernel fault leaves the context unusable) fails what follows too,
    // and the table still shows what ran before it.
    if (absl::Status s = cuda ? fp8::bench::cuda_release_cached_memory(0) : absl::OkStatus(); !s.ok()) {
      std::fprintf(stderr, "bench_train: releasing device memory after %s: %s\n", label(r).c_str(),
                   std::string(s.message()).c_str());
    }
    if (r.error.empty()) {
      std::fprintf(stderr, "bench_train: %s: %.1f ms/step over %lld steps (built in %.1f s), %.0f s elapsed\n",
                   label(r).c_str(), r.ms_per_step, static_cast<long long>(r.steps_timed), r.build_s,
                   seconds_between(start, Clock::now()));
    } else {
      std::fprintf(stderr, "bench_train: %s failed: %s\n", label(r).c_str(), r.error.c_str());
    }
    if (r.breakdown) r.breakdown->name = label(r);
    results.push_back(std::move(r));
  }

  const int64_t tokens_per_step = static_cast<int64_t>(info.batch_size) * info.seq_len;
  std::printf("# bench_train --device %s, one recipe at a time, %s on %s\n", cuda ? "cuda" : "cpu --sequential",
              fp8::bench::today().c_str(), cuda ? info.device.c_str() : info.peaks.machine.c_str());
  std::printf("# model: %s, %.2fB parameters; %lld tokens per step (%d x %lld)\n", info.model.describe().c_str(),
              static_cast<double>(info.model.parameter_count()) / 1e9, static_cast<long long>(tokens_per_step),
              info.batch_size, static_cast<long long>(info.seq_len));
  std::printf("# %s\n", data_line.c_str());
  std::printf("# each recipe in turn: built, %d warm-up steps, %d timed steps (fewer when its share of the %.0f s "
              "budget ran out: see 'steps'), destroyed\n",
              g.warmup, g.steps, g.budget_s);
  std::printf("# ms/step: the trainer's step time over the timed steps after the first; model TFLOP/s: (6 x linear "
              "parameters + attention) per token x tokens/s\n");
  const bool bf16 = info.model.activations == fp8::DType::kBFloat16;
  std::printf("# none: this engine's high-precision baseline, %s (train.compute_dtype); PyTorch's bf16: "
              "bench/torch_llama.py\n",
              bf16 ? "bf16 activations and bf16 GEMMs (fp32 master weights)"
                   : cuda ? "fp32 activations and fp32 GEMMs (no TF32), not bf16"
                          : "fp32 activations and fp32 GEMMs");
  const char* hp = cuda ? "bf16" : "fp32";
  if (cuda) {
    std::printf("# MFU against dense peaks: bf16 %.0f, fp8 %.0f TFLOP/s%s\n", info.peaks.hp_tflops,
                info.peaks.fp8_tflops, info.peaks.hp_tflops > 0 ? "" : " (unknown GPU: no MFU)");
  } else {
    std::printf("# MFU against the CPU's fp32 FMA peak, %.3f TFLOP/s\n", info.peaks.hp_tflops);
  }
  std::printf("# memory: GB = 1e9 bytes, peak = most in use (StepReport::peak_memory_bytes), reserved = held by the "
              "allocator\n");
  const bool modes = checkpointing.size() > 1 || checkpointing.front() != "none";
  if (modes) {
    std::printf("# recipe, mode: train.activation_checkpointing (model TFLOP/s counts no recomputation); "
                "'mem vs keep' and 'tokens/s vs keep': against the same recipe keeping every activation\n");
  }
  const double fpt = flops_per_token(info.model, info.seq_len);
  const Result* base = baseline_of(results);
  std::vector<std::string> columns{"recipe", "ms/step", "tokens/s", "vs none", "model TFLOP/s",
                                   std::string("% ") + hp + " peak", "% fp8 peak",
                                   "peak mem GB", "reserved GB", "steps", "build s", "loss"};
  if (modes) {
    columns.push_back("tokens/s vs keep");
    columns.push_back("mem vs keep");
  }
  fp8::bench::Table table(columns);
  bool failed = false;
  for (const Result& r : results) {
    if (!r.error.empty()) {
      failed = true;
      std::vector<std::string> row(columns.size(), "-");
      row[0] = label(r);
      row[1] = "failed";
      table.add(row);
      continue;
    }
    const double tflops = r.tokens_per_s * fpt / 1e12;
    std::vector<std::string> keep;
    if (modes) {
      const Result* k = keep_all_of(results, r);
      keep = {k != nullptr ? fmt(r.tokens_per_s / k->tokens_per_s, 2) + "x" : "-",
              k != nullptr && k->peak_memory > 0 ? fmt(static_cast<double>(r.peak_memory) / k->peak_memory, 2) + "x"
                                                 : "-"};
    }
    std::vector<std::string> row{label(r), fmt(r.ms_per_step, 1), fmt(r.tokens_per_s, 0),
               base != nullptr ? fmt(r.tokens_per_s / base->tokens_per_s, 2) + "x" : "-", fmt(tflops, cuda ? 1 : 4),
               info.peaks.hp_tflops > 0 ? fmt(100 * tflops / info.peaks.hp_tflops, 1) : "-",
               info.peaks.fp8_tflops > 0 && r.recipe != "none" ? fmt(100 * tflops / info.peaks.fp8_tflops, 1)
                                                                          : "-",
               gb(r.peak_memory), gb(r.reserved_memory), std::to_string(r.steps_timed), fmt(r.build_s, 1),
               fmt(r.loss, 3)};
    row.insert(row.end(), keep.begin(), keep.end());
    table.add(row);
  }
  table.print();
  for (const Result& r : results) {
    if (!r.error.empty()) std::printf("%s failed: %s\n", label(r).c_str(), r.error.c_str());
  }
  if (base != nullptr) {
    std::string line;
    for (const Result& r : results) {
      if (r.recipe == "none" || r.checkpointing != "none" || !r.error.empty()) continue;
      const double ratio = r.tokens_per_s / base->tokens_per_s;
      line += " " + r.recipe + " " + fmt(ratio, 2) + "x (" + (ratio >= 1.2 ? "met" : "missed") + ")";
    }
    if (cuda) {
      std::printf("target: fp8 tokens/s >= 1.20x our bf16 (none with bf16 activations%s):%s\n",
                  bf16 ? "" : "; THIS RUN'S none IS fp32, not bf16", line.c_str());
    }
  }
  if (cuda) {
    std::printf("target: fp8 faster than PyTorch bf16: bench/torch_llama.py --ours <this run's --csv> measures it\n");
  }
  std::vector<fp8::bench::NamedBreakdown> breakdowns;
  for (const Result& r : results) {
    if (r.error.empty() && r.breakdown) breakdowns.push_back(*r.breakdown);
    if (!r.breakdown_error.empty()) {
      std::printf("%s: the profiled steps failed (its timing above stands): %s\n", label(r).c_str(),
                  r.breakdown_error.c_str());
    }
  }
  if (!breakdowns.empty()) {
    std::printf("\n# where a step's time goes (--breakdown %d: each op's %s time, per step over that many steps "
                "after the timed ones; share of the step's span; calls per step)\n",
                g.breakdown, cuda ? "GPU (CUDA events around it)" : "wall");
    fp8::bench::print_breakdowns(breakdowns);
  }
  if (!opts.csv.empty()) write_csv(opts.csv, info, results);
  return failed ? 1 : 0;
}

// ---- FSDP over local ranks ---------------------------------------------------------------

// One rank's measured rounds of a setting. train.log_every is a round's length, so a round
// reports after its first step (covering that step) and after its last (covering the rest,
// as a mean): the communication sums each report's means times the steps it covers, and
// the round's time is the later reports' step time (StepReport::step_ms) times the steps
// they cover, every step but the first: the one-process table's ms/step, which leaves out
// the report's own reading of the casts' numerics as well. Reports (a wait for the device,
// and the casts' range counts) stay as rare as there.
class RoundTally final : public fp8::engine::TrainObserver {
 public:
  // Before each round's run(): `first_step` is the round's first.
  void begin_round(int64_t first_step, bool count) {
    counting_ = count;
    reported_through_ = first_step - 1;
    first_reported_ = false;
    round_seconds = 0;
  }
  void on_step(const fp8::engine::StepReport& r) override {
    const int64_t covered = r.step - reported_through_;
    reported_through_ = r.step;
    if (!counting_) return;
    if (r.comm) {
      sum.all_gather_fp8_bytes += covered * r.comm->all_gather_fp8_bytes;
      sum.all_gather_f32_bytes += covered * r.comm->all_gather_f32_bytes;
      sum.all_gather_bf16_bytes += covered * r.comm->all_gather_bf16_bytes;
      sum.reduce_scatter_f32_bytes += covered * r.comm->reduce_scatter_f32_bytes;
      sum.reduce_scatter_bf16_bytes += covered * r.comm->reduce_scatter_bf16_bytes;
      sum.comm_ms += covered * r.comm->comm_ms;
      sum.exposed_ms += covered * r.comm->exposed_ms;
      sum.tensor_all_reduces += covered * r.comm->tensor_all_reduces;
      sum.tensor_all_reduce_bytes += covered * r.comm->tensor_all_reduce_bytes;
      sum.tensor_ms += covered * r.comm->tensor_ms;
      sum.sequence_gather_fp8_bytes += covered * r.comm->sequence_gather_fp8_bytes;
      sum.sequence_gather_bytes += covered * r.comm->sequence_gather_bytes;
      sum.sequence_reduce_scatter_bytes += covered * r.comm->sequence_reduce_scatter_bytes;
      comm_steps += covered;
    }
    if (!first_reported_) {
      first_reported_ = true;
    } else {
      round_seconds += r.step_ms * static_cast<double>(covered) / 1e3;
    }
  }
  fp8::engine::StepComm sum;  // over comm_steps steps
  int64_t comm_steps = 0;
  double round_seconds = 0;   // this round's, every step but its first

 private:
  bool counting_ = false;  // off during the warm-up round
  int64_t reported_through_ = 0;
  bool first_reported_ = false;
};

// One --tensor entry: parallel.tensor, and parallel.sequence ("2sp").
struct TensorEntry {
  int tensor = 1;
  bool sequence = false;
  std::string label() const { return absl::StrCat(tensor, sequence ? "sp" : ""); }
};

// One setting: fp8 all-gather on or off (--all-gather-fp8), or a parallel.tensor (--tensor).
struct FsdpSetting {
  std::string name;    // "fp8 all-gather on", "tensorwise, T=2sp": the breakdown's column
  std::string key;     // its process groups' prefix in the store
  std::string recipe;  // the spec's fp8.recipe
  bool all_gather_fp8 = false;
  TensorEntry tensor;  // parallel.tensor and parallel.sequence
  std::string all_gather_refused;  // why the job spec turned the fp8 all-gather asked for off
  fp8::v1::JobSpec spec;
};

// A setting's trainer on one rank, and what its rounds measured.
struct FsdpContender : FsdpSetting {
  std::unique_ptr<fp8::engine::collectives::ProcessGroup> group;  // before the trainer: outlives it
  std::unique_ptr<fp8::engine::Trainer> trainer;
  RoundTally tally;
  double seconds = 0;  // sum over measured rounds of the slowest rank's time (all steps but the first)
  int64_t steps = 0;   // the steps `seconds` covers
  std::optional<fp8::bench::NamedBreakdown> breakdown;  // rank 0's, with --breakdown
};

struct FsdpSetup {
  Common common;
  bool cuda = false;  // rank r on GPU r, the trainers' groups over NCCL
  int nproc = 2;
  int threads = 1;  // per rank
  double timeout_s = 300;
  int breakdown = 0;  // steps profiled op by op after the measured rounds (two more run unprofiled)
  bool by_shape = false;  // --breakdown-by-shape
  bool by_tensor = false;  // --tensor: the settings differ in parallel.tensor
  fp8::engine::TrainerOptions trainer;  // FP8_FSDP_COLLECTIVES, as fp8-train reads it
  std::vector<FsdpSetting> settings;  // each rank builds a contender of each
};

// Joins a Gloo group of `size` ranks (0: every rank) as `rank`.
absl::StatusOr<std::unique_ptr<fp8::engine::collectives::ProcessGroup>> join(fp8::engine::collectives::KeyValueStore& store,
                                                                      int rank, const FsdpSetup& setup,
                                                                      const std::string& prefix, int size = 0) {
  fp8::engine::collectives::ProcessGroupOptions options;
  options.prefix = prefix;
  options.timeout = absl::Seconds(setup.timeout_s);
  return fp8::engine::collectives::make_gloo_process_group(store, rank, size > 0 ? size : setup.nproc, options);
}

// A trainer's group (of `size` ranks, 0: every rank): Gloo on the CPU; on a GPU, NCCL queued
// on the device's compute stream.
absl::StatusOr<std::unique_ptr<fp8::engine::collectives::ProcessGroup>> join_trainers(
    fp8::engine::collectives::KeyValueStore& store, int rank, const FsdpSetup& setup, const std::string& prefix,
    const fp8::engine::Device& device, int size = 0) {
  if (size == 0) size = setup.nproc;
  if (!setup.cuda) return join(store, rank, setup, prefix, size);
#ifdef FP8_HAVE_NCCL
  fp8::engine::collectives::ProcessGroupOptions options;
  options.prefix = prefix;
  options.timeout = absl::Seconds(setup.timeout_s);
  // FP8_NCCL_HOST_WAIT=1: every collective waits on the host, as fp8-train runs them then.
  const char* host_wait = std::getenv("FP8_NCCL_HOST_WAIT");
  const bool queued = host_wait == nullptr || std::string(host_wait) != "1";
  return fp8::engine::collectives::make_nccl_process_group(store, rank, size, options, device.ordinal(), nullptr,
                                                           queued ? device.stream() : nullptr);
#else
  (void)device;
  return absl::UnimplementedError("--device cuda --nproc needs NCCL, which this build does not have");
#endif
}

// Global tokens a step: train.batch_size sequences per data-parallel rank (a group of
// parallel.tensor ranks, which train on the same batch).
int64_t tokens_per_step(const FsdpSetup& setup, const FsdpContender& c) {
  return c.spec.train().batch_size() * c.spec.data().seq_len() * (setup.nproc / c.tensor.tensor);
}

double per_step(const FsdpContender& c, double v) { return v / static_cast<double>(c.tally.comm_steps); }

double tokens_per_s(const FsdpSetup& setup, const FsdpContender& c) {
  return static_cast<double>(c.steps * tokens_per_step(setup, c)) / c.seconds;
}

// --tensor: each parallel.tensor (per recipe, with --recipes) with FSDP's and the
// tensor-parallel all-reduces' communication apart.
void print_tensor_table(const FsdpSetup& setup, const std::vector<FsdpContender>& runs) {
  std::printf("# FSDP MB: all-gathered + reduce-scattered bytes per rank and step over the D data-parallel ranks "
              "(1 MB = 1e6 B); TP: the collectives across the T tensor-parallel ranks (all-reduces of partial "
              "outputs, input gradients, amaxes, the grad norm; with sequence parallelism, T=Nsp, also its "
              "all-gathers and reduce-scatters), all on the compute thread, so all exposed; SP MB: of TP MB, the "
              "tokens all-gathered as fp8 codes / in high precision (activations and gradients) / "
              "reduce-scattered; exposed %% = (FSDP exposed + TP ms) / ms per step\n");
  for (const FsdpContender& c : runs) {
    if (c.all_gather_refused.empty()) continue;
    std::printf("# %s: fp8 all-gather off, as the job spec requires there:\n#   %s\n", c.name.c_str(),
                absl::StrReplaceAll(c.all_gather_refused, {{"\n", "\n#   "}}).c_str());
  }
  const FsdpContender& base = runs[0];
  fp8::bench::Table table({"recipe", "T", "D x T", "fp8 AG", "ms/step", "tokens/s", "vs first", "FSDP MB",
                           "FSDP comm ms", "FSDP exposed ms", "TP all-reduces", "TP MB", "SP MB fp8/hp/RS", "TP ms",
                           "exposed %"});
  std::ofstream out;
  if (!setup.common.csv.empty()) {
    out.open(setup.common.csv);
    out << "recipe,tensor,sequence,data_parallel,all_gather_fp8,ms_per_step,tokens_per_s,fsdp_comm_ms,"
           "fsdp_exposed_ms,fsdp_bytes,tp_all_reduces,tp_bytes,sp_gather_fp8_bytes,sp_gather_bytes,"
           "sp_reduce_scatter_bytes,tp_ms\n";
  }
  for (const FsdpContender& c : runs) {
    const fp8::engine::StepComm& m = c.tally.sum;
    const double ms = 1e3 * c.seconds / static_cast<double>(c.steps);
    const double fsdp_bytes = per_step(c, m.all_gather_fp8_bytes + m.all_gather_f32_bytes + m.all_gather_bf16_bytes +
                                              m.reduce_scatter_f32_bytes + m.reduce_scatter_bf16_bytes);
    const double exposed = per_step(c, m.exposed_ms), tp_ms = per_step(c, m.tensor_ms);
    const double sp[] = {per_step(c, m.sequence_gather_fp8_bytes), per_step(c, m.sequence_gather_bytes),
                         per_step(c, m.sequence_reduce_scatter_bytes)};
    const double tps = tokens_per_s(setup, c);
    const int t = c.tensor.tensor, data = setup.nproc / t;
    table.add({c.recipe, c.tensor.label(), absl::StrCat(data, " x ", t), c.all_gather_fp8 ? "on" : "off",
               fmt(ms, 2), fmt(tps, 0), fmt(tps / tokens_per_s(setup, base), 2) + "x",
               fmt(fsdp_bytes / 1e6, 3), fmt(per_step(c, m.comm_ms), 2), fmt(exposed, 2),
               fmt(per_step(c, m.tensor_all_reduces), 0), fmt(per_step(c, m.tensor_all_reduce_bytes) / 1e6, 3),
               c.tensor.sequence ? absl::StrCat(fmt(sp[0] / 1e6, 3), "/", fmt(sp[1] / 1e6, 3), "/", fmt(sp[2] / 1e6, 3))
                                 : "-",
               fmt(tp_ms, 2), fmt(100 * (exposed + tp_ms) / ms, 1)});
    if (out.is_open()) {
      out << c.recipe << "," << t << "," << (c.tensor.sequence ? "on" : "off") << "," << data << ","
          << (c.all_gather_fp8 ? "on" : "off") << "," << ms << "," << tps << "," << per_step(c, m.comm_ms) << ","
          << exposed << "," << fsdp_bytes << "," << per_step(c, m.tensor_all_reduces) << ","
          << per_step(c, m.tensor_all_reduce_bytes) << "," << sp[0] << "," << sp[1] << "," << sp[2] << "," << tp_ms
          << "\n";
    }
  }
  table.print();
}

// --all-gather-fp8: FSDP with the fp8 all-gather off (the baseline, when it ran) and on.
void print_all_gather_table(const FsdpSetup& setup, const std::vector<FsdpContender>& runs) {
  std::printf("# all-gather MB: gathered bytes per rank and step (1 MB = 1e6 B), by the type that travelled\n");
  const FsdpContender& base = runs[0];
  auto gathered = [&](const FsdpContender& c) {
    const fp8::engine::StepComm& m = c.tally.sum;
    return per_step(c, m.all_gather_fp8_bytes + m.all_gather_f32_bytes + m.all_gather_bf16_bytes);
  };
  auto reduce_scattered = [&](const FsdpContender& c) {
    return per_step(c, c.tally.sum.reduce_scatter_f32_bytes + c.tally.sum.reduce_scatter_bf16_bytes);
  };
  fp8::bench::Table table({"fp8 all-gather", "ms/step", "tokens/s", "vs off", "comm ms", "exposed ms", "exposed %",
                           "AG fp8 MB", "AG fp32 MB", "AG bf16 MB", "AG MB vs off", "RS MB"});
  std::ofstream out;
  if (!setup.common.csv.empty()) {
    out.open(setup.common.csv);
    out << "all_gather_fp8,ms_per_step,tokens_per_s,comm_ms,exposed_ms,ag_fp8_bytes,ag_f32_bytes,rs_bytes,"
           "ag_bf16_bytes\n";
  }
  const bool has_base = !base.all_gather_fp8;
  for (const FsdpContender& c : runs) {
    const double ms = 1e3 * c.seconds / static_cast<double>(c.steps);
    const double exposed = per_step(c, c.tally.sum.exposed_ms);
    table.add({c.all_gather_fp8 ? "on" : "off", fmt(ms, 2), fmt(tokens_per_s(setup, c), 0),
               has_base ? fmt(tokens_per_s(setup, c) / tokens_per_s(setup, base), 2) + "x" : "-",
               fmt(per_step(c, c.tally.sum.comm_ms), 2), fmt(exposed, 2), fmt(100 * exposed / ms, 1),
               fmt(per_step(c, c.tally.sum.all_gather_fp8_bytes) / 1e6, 3),
               fmt(per_step(c, c.tally.sum.all_gather_f32_bytes) / 1e6, 3),
               fmt(per_step(c, c.tally.sum.all_gather_bf16_bytes) / 1e6, 3),
               has_base ? fmt(gathered(c) / gathered(base), 2) + "x" : "-", fmt(reduce_scattered(c) / 1e6, 3)});
    if (out.is_open()) {
      out << (c.all_gather_fp8 ? "on" : "off") << "," << ms << "," << tokens_per_s(setup, c) << ","
          << per_step(c, c.tally.sum.comm_ms) << "," << exposed << ","
          << per_step(c, c.tally.sum.all_gather_fp8_bytes) << "," << per_step(c, c.tally.sum.all_gather_f32_bytes)
          << "," << reduce_scattered(c) << "," << per_step(c, c.tally.sum.all_gather_bf16_bytes) << "\n";
    }
  }
  table.print();
}

void print_fsdp_results(const FsdpSetup& setup, const std::vector<FsdpContender>& runs) {
  const fp8::v1::JobSpec& spec = runs[0].trainer->spec();
  const fp8::bench::Peaks peaks = fp8::bench::machine_peaks(runs[0].trainer->model().device().backend());
  if (setup.cuda) {
    std::printf("# bench_train --device cuda --nproc %d, %s on %s: rank r on GPU r, NCCL queued on the device\n",
                setup.nproc, fp8::bench::today().c_str(), peaks.machine.c_str());
  } else {
    std::printf("# bench_train --nproc %d, %s on %s: %d ranks x %d threads, Gloo over 127.0.0.1\n", setup.nproc,
                fp8::bench::today().c_str(), peaks.machine.c_str(), setup.nproc, setup.threads);
  }
  std::printf("# model: %s; %s\n", runs[0].trainer->model().config().describe().c_str(),
              runs[0].trainer->fp8_summary().c_str());
  for (size_t i = 1; i < runs.size(); ++i) {  // another recipe's (--tensor --recipes)
    if (runs[i].recipe != runs[i - 1].recipe) std::printf("# %s\n", runs[i].trainer->fp8_summary().c_str());
  }
  if (setup.by_tensor) {
    std::printf("# %lld tokens per step over all ranks in every setting: D = %d / T data-parallel groups of T "
                "tensor-parallel ranks, each group training train.batch_size = %d x T sequences of %lld (its T "
                "ranks train the same ones); %d rounds x %d steps per setting, interleaved, each round timed after "
                "its first step\n",
                static_cast<long long>(tokens_per_step(setup, runs[0])), setup.nproc,
                spec.train().batch_size() / runs[0].tensor.tensor, static_cast<long long>(spec.data().seq_len()),
                setup.common.rounds, setup.common.steps_per_round);
  } else {
    std::printf("# %lld tokens per step over all ranks (%d per rank x %lld x %d ranks); %d rounds x %d steps per "
                "setting, interleaved, each round timed after its first step\n",
                static_cast<long long>(tokens_per_step(setup, runs[0])), spec.train().batch_size(),
                static_cast<long long>(spec.data().seq_len()), setup.nproc, setup.common.rounds,
                setup.common.steps_per_round);
  }
  std::printf(setup.cuda ? "# comm: collectives' device time; exposed: the compute stream waiting for them (per "
                          "step, mean over ranks; from events, as the watchdog saw them complete)\n"
                        : "# comm: collectives' time on the communication thread; exposed: the compute thread "
                          "waiting for them (per step, mean over ranks)\n");
  if (setup.by_tensor) {
    print_tensor_table(setup, runs);
  } else {
    print_all_gather_table(setup, runs);
  }
  std::vector<fp8::bench::NamedBreakdown> breakdowns;
  for (const FsdpContender& c : runs) {
    if (c.breakdown) breakdowns.push_back(*c.breakdown);
  }
  if (!breakdowns.empty()) {
    std::printf("\n# where rank 0's step time goes (--breakdown %d: each op's %s time, per step over that many "
                "steps after the measured rounds; share of the step's span; calls per step)\n",
                setup.breakdown, setup.cuda ? "GPU (CUDA events around it)" : "wall");
    fp8::bench::print_breakdowns(breakdowns);
  }
}

// Rank 0's per-op breakdown of `c`'s next setup.breakdown steps (every rank trains them;
// one unprofiled on each side, as one recipe at a time does).
absl::Status profile_fsdp_steps(const FsdpSetup& setup, int rank, fp8::bench::OpProfiler& profiler, FsdpContender& c) {
  const int64_t first = c.trainer->steps_done() + 1, last = first + setup.breakdown + 1;
  ProfileSteps observer(profiler, first, last);
  fp8::engine::RunControl control;
  control.stop_after_step = last;
  absl::StatusOr<fp8::engine::TrainSummary> s = c.trainer->run(observer, control);
  profiler.set_on(false);
  absl::StatusOr<fp8::bench::OpBreakdown> b = profiler.take();
  if (!s.ok()) return s.status();
  if (!b.ok()) return b.status();
  if (rank == 0) {
    c.breakdown = fp8::bench::NamedBreakdown{c.name, *b, setup.breakdown};
  }
  return absl::OkStatus();
}

// One rank: join, build a trainer per setting, take turns, and (rank 0) print.
absl::Status fsdp_rank(const FsdpSetup& setup, int rank, const std::filesystem::path& dir) {
  // Before any engine call: the kernels' pool is sized at its first use.
  fp8::cpu::set_num_threads(setup.threads);
  openblas_set_num_threads(setup.threads);

  std::unique_ptr<fp8::engine::Device> gpu;
  const fp8::engine::Device* device = &fp8::engine::Device::cpu();
  if (setup.cuda) {
    absl::StatusOr<std::unique_ptr<fp8::engine::Device>> d = fp8::engine::Device::cuda(rank, fp8::bench::cuda_model_ops_options_from_environment());
    if (!d.ok()) return d.status();
    gpu = std::move(*d);
    device = gpu.get();
  }
  // With --breakdown the trainers run behind the profiling wrappers (off until the profiled
  // steps: a forwarded call costs nothing measurable); their groups take the device itself.
  std::optional<ProfiledDevice> profiled;
  if (setup.breakdown > 0) {
    absl::StatusOr<fp8::ModelOps*> ops = device->model_ops();
    if (!ops.ok()) return ops.status();
    absl::StatusOr<std::unique_ptr<fp8::bench::OpTimer>> timer =
        setup.cuda ? fp8::bench::cuda_op_timer(rank, device->stream()) : fp8::bench::host_op_timer();
    if (!timer.ok()) return timer.status();
    profiled.emplace(*device, **ops, std::move(*timer));
    profiled->profiler.set_by_shape(setup.by_shape);
  }
  const fp8::engine::Device& trained_on = profiled ? profiled->device : *device;
  absl::StatusOr<std::unique_ptr<fp8::engine::collectives::FileStore>> store =
      fp8::engine::collectives::FileStore::open(dir / "rendezvous");
  if (!store.ok()) return store.status();
  // The benchmark's own group (barriers, timings), apart from the trainers' groups so that
  // it does not show in their communication counters.
  absl::StatusOr<std::unique_ptr<fp8::engine::collectives::ProcessGroup>> control = join(**store, rank, setup, "bench/");
  if (!control.ok()) return control.status();
  std::vector<FsdpContender> runs;
  runs.reserve(setup.settings.size());
  for (const FsdpSetting& c : setup.settings) {
    FsdpContender& r = runs.emplace_back();
    static_cast<FsdpSetting&>(r) = c;
    absl::StatusOr<std::unique_ptr<fp8::engine::collectives::ProcessGroup>> g =
        join_trainers(**store, rank, setup, c.key, *device);
    if (!g.ok()) return g.status();
    r.group = std::move(*g);
    // A D x T mesh's groups (world_size > parallel.tensor > 1) meet through the same store,
    // under this setting's prefix.
    fp8::engine::TrainerOptions options = setup.trainer;
    options.make_group = [&store, &setup, device, key = c.key](int group_rank, int size, const std::string& prefix) {
      return join_trainers(**store, group_rank, setup, key + prefix, *device, size);
    };
    absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> t =
        fp8::engine::Trainer::create(c.spec, trained_on, r.group.get(), options);
    if (!t.ok()) return t.status();
    r.trainer = std::move(*t);
  }

  const int steps_per_round = setup.common.steps_per_round;
  for (int round = 0; round <= setup.common.rounds; ++round) {
    for (FsdpContender& c : runs) {
      fp8::engine::RunControl rc;
      rc.stop_after_step = static_cast<int64_t>(round + 1) * steps_per_round;
      c.tally.begin_round(c.trainer->steps_done() + 1, /*count=*/round > 0);  // the first round warms up
      if (absl::Status s = (*control)->barrier(); !s.ok()) return s;
      absl::StatusOr<fp8::engine::TrainSummary> s = c.trainer->run(c.tally, rc);
      if (!s.ok()) return s.status();
      double seconds = c.tally.round_seconds;
      if (absl::Status m = (*control)->all_reduce(&seconds, 1, fp8::engine::collectives::ReduceOp::kMax); !m.ok()) return m;
      if (round == 0) continue;
      c.seconds += seconds;
      c.steps += steps_per_round - 1;
    }
  }
  if (profiled) {
    for (FsdpContender& c : runs) {
      if (absl::Status s = (*control)->barrier(); !s.ok()) return s;
      if (absl::Status s = profile_fsdp_steps(setup, rank, profiled->profiler, c); !s.ok()) return s;
    }
  }
  // Every rank's communication, averaged (the bytes and steps are the same on every rank).
  for (FsdpContender& c : runs) {
    fp8::engine::StepComm& m = c.tally.sum;
    double* fields[] = {&m.all_gather_fp8_bytes,      &m.all_gather_f32_bytes,  &m.all_gather_bf16_bytes,
                        &m.reduce_scatter_f32_bytes,  &m.reduce_scatter_bf16_bytes,
                        &m.comm_ms,                   &m.exposed_ms,            &m.tensor_all_reduces,
                        &m.tensor_all_reduce_bytes,   &m.tensor_ms,             &m.sequence_gather_fp8_bytes,
                        &m.sequence_gather_bytes,     &m.sequence_reduce_scatter_bytes};
    constexpr int kFields = sizeof(fields) / sizeof(fields[0]);
    double v[kFields];
    for (int i = 0; i < kFields; ++i) v[i] = *fields[i];
    if (absl::Status s = (*control)->all_reduce(v, kFields, fp8::engine::collectives::ReduceOp::kSum); !s.ok()) return s;
    for (int i = 0; i < kFields; ++i) *fields[i] = v[i] / setup.nproc;
  }
  if (rank == 0) print_fsdp_results(setup, runs);
  return absl::OkStatus();
}

// `tensors` empty: fp8 all-gather off and on (`all_gather_fp8` both, or the one named).
// Else one setting per recipe (the job's when `recipes` is empty) and entry of `tensors`,
// fp8 all-gather as `all_gather_fp8` says (both: the job's) wherever the job spec allows it.
int fsdp_ranks(const Common& c, bool cuda, int nproc, const std::string& all_gather_fp8, double timeout_s,
               int breakdown, bool by_shape, const std::vector<TensorEntry>& tensors,
               std::vector<std::string> recipes) {
  FsdpSetup setup;
  setup.common = c;
  setup.cuda = cuda;
  setup.nproc = nproc;
  setup.timeout_s = timeout_s;
  setup.breakdown = breakdown;
  setup.by_shape = by_shape;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  setup.threads = std::max(1, static_cast<int>(cores) / nproc);
  if (const char* env = std::getenv("FP8_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    setup.threads = std::atoi(env);  // the user's choice stands
  }
  if (const char* env = std::getenv("FP8_FSDP_COLLECTIVES"); env != nullptr) {
    absl::StatusOr<fp8::engine::fsdp::UnitCollectives> collectives =
        fp8::engine::fsdp::parse_unit_collectives(env, "FP8_FSDP_COLLECTIVES in the environment");
    fp8::bench::check(collectives.status(), "FP8_FSDP_COLLECTIVES");
    setup.trainer.collectives = *collectives;
  }
  const int64_t profiled_steps = breakdown > 0 ? breakdown + 2 : 0;
  const int64_t total_steps = static_cast<int64_t>(c.rounds + 1) * c.steps_per_round + profiled_steps;
  // Loaded (and validated) here, before the forks: a bad job fails once, not once per rank.
  // `all_gather_where_allowed`: where the job spec refuses the settings, try again with the
  // fp8 all-gather off (beside tensor parallelism it needs FSDP, D > 1, and weights cast per
  // tensor or block), so that one --tensor list can hold every T; the table says why.
  auto add = [&](const std::string& key, std::vector<std::string> overrides,
                 bool all_gather_where_allowed = false) -> FsdpSetting& {
    FsdpSetting& k = setup.settings.emplace_back();
    k.key = key;
    overrides.push_back(absl::StrCat("resources.world_size=", nproc));
    overrides.push_back(absl::StrCat("train.log_every=", c.steps_per_round));
    absl::StatusOr<fp8::v1::JobSpec> spec = try_load_job(c, overrides, total_steps);
    if (!spec.ok() && all_gather_where_allowed) {
      overrides.push_back("fp8.all_gather_fp8=false");
      absl::StatusOr<fp8::v1::JobSpec> off = try_load_job(c, overrides, total_steps);
      if (off.ok()) k.all_gather_refused = std::string(spec.status().message());
      if (off.ok()) spec = std::move(off);
    }
    fp8::bench::check(spec.status(), "loading the job");
    k.spec = *std::move(spec);
    k.all_gather_fp8 = k.spec.fp8().all_gather_fp8();
    k.tensor.tensor = std::max(1, k.spec.parallel().tensor());
    k.tensor.sequence = k.spec.parallel().sequence();
    k.recipe = absl::AsciiStrToLower(fp8::v1::Fp8Spec::Recipe_Name(k.spec.fp8().recipe()));
    return k;
  };
  if (tensors.empty()) {
    for (bool on : {false, true}) {  // off first: the baseline the ratios divide by
      if (all_gather_fp8 == (on ? "off" : "on")) continue;
      add(on ? "ag-fp8-on/" : "ag-fp8-off/", {absl::StrCat("fp8.all_gather_fp8=", on ? "true" : "false")}).name =
          on ? "fp8 all-gather on" : "fp8 all-gather off";
    }
  } else {
    // The same global batch in every setting: the job's train.batch_size is a rank's at
    // T = 1, and a group of T ranks (one data-parallel rank) trains T times as many.
    setup.by_tensor = true;
    const int batch = load_job(c, {absl::StrCat("resources.world_size=", nproc), "parallel.tensor=1"}, total_steps)
                          .train()
                          .batch_size();
    if (recipes.empty()) recipes.push_back("");  // the job's
    for (const std::string& recipe : recipes) {
      for (const TensorEntry& t : tensors) {
        std::vector<std::string> o = {absl::StrCat("parallel.tensor=", t.tensor),
                                      absl::StrCat("parallel.sequence=", t.sequence ? "true" : "false"),
                                      absl::StrCat("train.batch_size=", batch * t.tensor)};
        if (!recipe.empty()) o.push_back("fp8.recipe=" + recipe);
        if (all_gather_fp8 != "both") {
          o.push_back(absl::StrCat("fp8.all_gather_fp8=", all_gather_fp8 == "on" ? "true" : "false"));
        }
        FsdpSetting& k = add(absl::StrCat("tp-", recipe, "-", t.label(), "/"), o, /*all_gather_where_allowed=*/true);
        k.name = absl::StrCat(k.recipe, ", T=", t.label());
      }
    }
  }
  const bool ok = fp8::bench::run_local_ranks(nproc, [&](int rank, const std::filesystem::path& dir) {
    const absl::Status s = fsdp_rank(setup, rank, dir);
    if (s.ok()) return 0;
    std::fprintf(stderr, "bench_train [rank %d of %d]: %s\n", rank, nproc, std::string(s.message()).c_str());
    return 1;
  });
  return ok ? 0 : 1;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The compiled-in example job, or the same file under ./examples/jobs when the binary runs
// from a bundle on another machine (scripts/gpu/run.sh runs in the repository root).
std::string default_config(bool gpu) {
  const std::filesystem::path built = gpu ? FP8_GPU_EXAMPLE_JOB : FP8_EXAMPLE_JOB;
  std::error_code error;
  if (std::filesystem::is_regular_file(built, error)) return built.string();
  const std::filesystem::path here = std::filesystem::path("examples/jobs") / built.filename();
  if (std::filesystem::is_regular_file(here, error)) return here.string();
  return built.string();  // the loader's error names it
}

}  // namespace

int main(int argc, char** argv) {
  fp8::train_cli::ensure_blas_environment(argv);  // as fp8-train runs
  fp8::bench::apply_threads_from_environment();
  CLI::App app{"bench_train: training tokens/s per fp8 recipe vs the high-precision baseline"};
  Common c;
  GpuOptions g;
  std::string device = "cpu";
  std::string recipes_arg;
  int nproc = 0;
  std::string all_gather_fp8 = "both";
  double timeout_s = 300;
  app.add_option("--device", device, "cpu: every recipe interleaved in one process; cuda: GPU 0, one recipe at a time")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--config", c.config,
                 "the job file (default: examples/jobs/tiny-cpu.yaml; with --device cuda, llama-h100.yaml)");
  app.add_option("--set", c.overrides, "override a field of the job, e.g. --set model.dim=256");
  auto* rounds_opt =
      app.add_option("--rounds", c.rounds, "cpu: measured rounds (one more warms up)")->check(CLI::PositiveNumber);
  auto* steps_opt = app.add_option("--steps", c.steps_per_round,
                                   "cpu: steps per recipe per round (default 5); cuda: timed steps per recipe "
                                   "(default 8)")
                        ->check(CLI::PositiveNumber);
  auto* warmup_opt = app.add_option("--warmup", g.warmup, "cuda: warm-up steps per recipe before the timed ones")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  auto* budget_opt = app.add_option("--budget", g.budget_s,
                                    "cuda: seconds for the whole run; each recipe stops early once its equal share "
                                    "of what is left is spent")
                         ->check(CLI::PositiveNumber)
                         ->capture_default_str();
  auto* breakdown_opt =
      app.add_option("--breakdown", g.breakdown,
                     "cuda, --sequential, --nproc: after the timed steps, N more (and one unprofiled on each side) "
                     "with each op's device time marked: where a step's time goes, per recipe (rank 0's, per "
                     "setting with --nproc)")
          ->check(CLI::PositiveNumber);
  app.add_flag("--breakdown-by-shape", g.by_shape,
               "with --breakdown: a row per GEMM shape (MxKxN), per cast shape and per device copy size")
      ->needs(breakdown_opt);
  bool sequential = false;
  app.add_flag("--sequential", sequential,
               "cpu: one recipe at a time, built, warmed up, timed and destroyed in turn, as --device cuda does");
  auto* recipes_opt = app.add_option("--recipes", recipes_arg,
                                     "comma-separated recipes to run (default all: none first, the baseline the "
                                     "ratios divide by)");
  std::string checkpointing_arg = "none";
  auto* checkpointing_opt =
      app.add_option("--activation-checkpointing", checkpointing_arg,
                     "one recipe at a time: comma-separated train.activation_checkpointing modes to run each recipe "
                     "under (none, full, selective), compared with none")
          ->capture_default_str();
  app.add_option("--data", c.data,
                 "auto: the job's corpus if the file exists, else synthetic text; synthetic; job")
      ->check(CLI::IsMember({"auto", "synthetic", "job"}))
      ->capture_default_str();
  app.add_option("--csv", c.csv, "also write the results here (bench/torch_llama.py --ours reads it)");
  auto* nproc_opt = app.add_option("--nproc", nproc,
                                   "FSDP over N local ranks (forked; Gloo over 127.0.0.1, with --device cuda NCCL "
                                   "on GPUs 0..N-1) on the job's recipe, fp8 all-gather on vs off")
                        ->check(CLI::Range(1, 64));
  app.add_option("--all-gather-fp8", all_gather_fp8, "with --nproc: which settings of fp8.all_gather_fp8 to run")
      ->check(CLI::IsMember({"both", "on", "off"}))
      ->needs(nproc_opt)
      ->capture_default_str();
  std::string tensor_arg;
  auto* tensor_opt =
      app.add_option("--tensor", tensor_arg,
                     "with --nproc: comma-separated parallel.tensor values, one setting each at the same ranks and "
                     "global batch (each must divide N; 'sp' after one, e.g. 2sp, adds parallel.sequence; fp8 "
                     "all-gather wherever the job spec allows it); --recipes runs each recipe at each")
          ->needs(nproc_opt);
  app.add_option("--timeout", timeout_s, "with --nproc: seconds the rendezvous and each collective wait for a peer")
      ->check(CLI::PositiveNumber)
      ->needs(nproc_opt)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const bool gpu = device == "cuda";
  if (gpu && nproc_opt->count() == 0 && rounds_opt->count() > 0) {
    fp8::bench::die("--device cuda without --nproc takes no --rounds (one recipe at a time: --warmup, --steps)");
  }
  std::vector<TensorEntry> tensors;
  for (const std::string& t : split_list(tensor_arg)) {
    TensorEntry e;
    e.sequence = absl::EndsWith(t, "sp");
    const std::string number = e.sequence ? t.substr(0, t.size() - 2) : t;
    e.tensor = std::atoi(number.c_str());
    if (e.tensor < 1 || std::to_string(e.tensor) != number || nproc % e.tensor != 0) {
      fp8::bench::die("--tensor: '" + t + "' is not a positive divisor of --nproc " + std::to_string(nproc) +
                      " (with 'sp' after it for sequence parallelism)");
    }
    if (e.sequence && e.tensor == 1) {
      fp8::bench::die("--tensor: '" + t + "': sequence parallelism needs T > 1 (the ranks that share the tokens)");
    }
    tensors.push_back(e);
  }
  if (tensor_opt->count() > 0 && tensors.empty()) fp8::bench::die("--tensor: none given");
  if (gpu && nproc_opt->count() > 0 && tensors.empty() && all_gather_fp8 == "both") {
    fp8::bench::die("--device cuda --nproc: pick --all-gather-fp8 on or off (one trainer per GPU at a time)");
  }
  if (gpu && tensors.size() > 1) fp8::bench::die("--device cuda --tensor: one value (one trainer per GPU at a time)");
  if (!gpu && !sequential && (warmup_opt->count() > 0 || budget_opt->count() > 0)) {
    fp8::bench::die("--warmup and --budget are for --device cuda (or --sequential)");
  }
  if (!gpu && !sequential && nproc_opt->count() == 0 && breakdown_opt->count() > 0) {
    fp8::bench::die("--breakdown is for one recipe at a time (--device cuda or --sequential) or --nproc");
  }
  if (nproc_opt->count() > 0 && c.steps_per_round < 2) {
    fp8::bench::die("--nproc needs --steps >= 2 (a round's first step is not timed)");
  }
  if (sequential && (gpu || nproc_opt->count() > 0 || rounds_opt->count() > 0)) {
    fp8::bench::die("--sequential is the CPU's version of --device cuda's one recipe at a time: no --nproc, --rounds");
  }
  if (nproc_opt->count() > 0 && tensors.empty() && recipes_opt->count() > 0) {
    fp8::bench::die("--nproc runs the job's recipe (set it with --set fp8.recipe=...), not --recipes (but --tensor does)");
  }
  if (gpu && !tensors.empty() && split_list(recipes_arg).size() > 1) {
    fp8::bench::die("--device cuda --tensor: one recipe (one trainer per GPU at a time)");
  }
  const bool recipe_by_recipe = (gpu || sequential) && nproc_opt->count() == 0;
  if (recipe_by_recipe && steps_opt->count() > 0) g.steps = c.steps_per_round;
  if (recipe_by_recipe && g.steps < 2) {
    fp8::bench::die("one recipe at a time needs --steps >= 2 (the first timed step is not counted)");
  }
  if (c.config.empty()) c.config = default_config(gpu);
  std::vector<std::string> recipes = recipes_opt->count() > 0 ? split_list(recipes_arg) : kAllRecipes;
  for (const std::string& entry : recipes) {
    if (std::find(kAllRecipes.begin(), kAllRecipes.end(), entry) == kAllRecipes.end()) {
      fp8::bench::die("--recipes: unknown recipe '" + entry + "'");
    }
  }
  if (recipes.empty()) fp8::bench::die("--recipes: none given");
  std::vector<std::string> checkpointing = split_list(checkpointing_arg);
  for (const std::string& mode : checkpointing) {
    if (mode != "none" && mode != "full" && mode != "selective") {
      fp8::bench::die("--activation-checkpointing: unknown mode '" + mode + "' (none, full, selective)");
    }
  }
  if (checkpointing.empty()) fp8::bench::die("--activation-checkpointing: none given");
  if (checkpointing_opt->count() > 0 && !recipe_by_recipe) {
    fp8::bench::die("--activation-checkpointing is for one recipe at a time (--device cuda or --sequential)");
  }

  std::optional<TempDir> tmp;  // the synthetic corpus, removed on return
  const std::string data_line = prepare_data(c, tmp);
  if (nproc_opt->count() > 0) {
    return fsdp_ranks(c, gpu, nproc, all_gather_fp8, timeout_s, g.breakdown, g.by_shape, tensors,
                      recipes_opt->count() > 0 ? recipes : std::vector<std::string>{});
  }
  if (gpu || sequential) return one_at_a_time(c, g, recipes, checkpointing, data_line, gpu);
  return single_process_cpu(c, recipes, data_line);
}
