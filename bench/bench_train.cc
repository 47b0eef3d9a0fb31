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
//
// On a CPU every fp8 recipe costs more than fp32: fp8 is emulated there (casts in
// software, GEMMs on widened values), so this measures the emulation's overhead; the
// speed-up fp8 exists for is on a GPU's tensor cores (bench_gemm --device cuda).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/jobspec/loader.h"
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

}  // namespace

int main(int argc, char** argv) {
  fp8::train_cli::ensure_blas_environment(argv);  // as fp8-train runs
  CLI::App app{"bench_train: training tokens/s per fp8 recipe vs the high-precision baseline"};
  std::string config = FP8_EXAMPLE_JOB;
  std::vector<std::string> overrides;
  int rounds = 6, steps_per_round = 5;
  std::string csv;
  app.add_option("--config", config, "the job file");
  app.add_option("--set", overrides, "override a field of the job, e.g. --set model.dim=256");
  app.add_option("--rounds", rounds, "measured rounds (one more warms up)")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps_per_round, "steps per recipe per round")->check(CLI::PositiveNumber);
  app.add_option("--csv", csv, "also write the results here");
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::string> recipes = {"none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"};
  const int64_t total_steps = static_cast<int64_t>(rounds + 1) * steps_per_round;
  std::vector<Contender> runs;
  for (const std::string& recipe : recipes) {
    std::vector<std::string> o = overrides;
    o.push_back("fp8.recipe=" + recipe);
    o.push_back(absl::StrCat("train.steps=", total_steps));
    o.push_back("train.eval_every=0");
    o.push_back("train.warmup_steps=0");  // the schedule does not change a step's cost; short runs need this
    absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::LoadJobSpecFile(config, o);
    fp8::bench::check(spec.status(), "loading the job");
    spec->mutable_checkpoint()->clear_dir();  // a benchmark writes no checkpoints
    absl::StatusOr<std::unique_ptr<fp8::engine::Trainer>> t =
        fp8::engine::Trainer::create(*spec, fp8::engine::Device::cpu());
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
  if (!csv.empty()) out.open(csv), out << "recipe,ms_per_step,tokens_per_s,vs_none\n";
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
