// Shared pieces of the training-loop tests: a job spec for a tiny model, a synthetic
// corpus, and an observer that keeps everything the loop reports.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/loader.h"
#include "gtest/gtest.h"
#include "worker/engine/train/train_observer.h"

namespace fp8::engine::testing {

// A scratch directory under the system temp dir, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / absl::StrCat("fp8-", tag, "-", rd(), rd());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Deterministic text with structure a model can learn: sentences drawn from a small
// vocabulary of words, so the byte-level loss falls quickly.
inline void write_synthetic_corpus(const std::filesystem::path& file, size_t bytes) {
  static const char* kWords[] = {"the", "fp8", "model", "trains", "on", "bytes", "and", "its", "loss",
                                 "falls", "while", "scales", "follow", "amax", "history", "of", "each", "layer"};
  std::mt19937 rng(7);
  std::string text;
  while (text.size() < bytes) {
    const int words = 4 + static_cast<int>(rng() % 8);
    for (int i = 0; i < words; ++i) {
      absl::StrAppend(&text, i == 0 ? "" : " ", kWords[rng() % std::size(kWords)]);
    }
    text += ".\n";
  }
  std::ofstream(file, std::ios::binary) << text;
}

// A resolved spec for a tiny Llama; `extra` holds overrides ("fp8.recipe=delayed").
inline v1::JobSpec tiny_job(const std::filesystem::path& corpus, const std::filesystem::path& checkpoint_dir,
                           std::vector<std::string> extra = {}) {
  const std::string yaml = absl::StrCat(R"(name: tiny-test
model: {dim: 32, n_layers: 2, n_heads: 2, ffn_dim: 64, max_seq_len: 32}
data: {path: )", corpus.string(), R"(, seq_len: 32, val_fraction: 0.1}
train: {steps: 20, batch_size: 4, lr: 3e-3, warmup_steps: 4, log_every: 1, eval_every: 5, eval_batches: 2}
fp8: {recipe: tensorwise}
checkpoint: {dir: )", checkpoint_dir.string(), R"(, every: 5, keep: 10}
)");
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(yaml, "tiny-test.yaml", extra);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

class RecordingObserver final : public TrainObserver {
 public:
  void on_start(const TrainStart& s) override { starts.push_back(s); }
  void on_step(const StepReport& r) override { steps.push_back(r); }
  void on_checkpoint(int64_t step, const std::filesystem::path&) override { checkpoints.push_back(step); }
  void on_warning(const std::string& w) override { warnings.push_back(w); }
  void on_finish(const TrainSummary& s) override { summaries.push_back(s); }
  void on_cast_numerics(int64_t step, const std::vector<CastNumericsRecord>& casts) override {
    cast_numerics.emplace_back(step, casts);
  }

  std::vector<TrainStart> starts;
  std::vector<StepReport> steps;
  std::vector<std::pair<int64_t, std::vector<CastNumericsRecord>>> cast_numerics;
  std::vector<int64_t> checkpoints;
  std::vector<std::string> warnings;
  std::vector<TrainSummary> summaries;
};

}  // namespace fp8::engine::testing
