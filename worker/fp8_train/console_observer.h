// fp8-train's log: one line per report of the training loop, on stdout, in a fixed format
// that reads well in a terminal and greps well in a log file.
#pragma once

#include <cstdio>

#include "worker/engine/train/train_observer.h"

namespace fp8::train_cli {

class ConsoleObserver final : public engine::TrainObserver {
 public:
  explicit ConsoleObserver(std::FILE* out) : out_(out) {}
  void on_start(const engine::TrainStart& s) override;
  void on_step(const engine::StepReport& r) override;
  void on_checkpoint(int64_t step, const std::filesystem::path& dir) override;
  void on_warning(const std::string& w) override;
  void on_finish(const engine::TrainSummary& s) override;

 private:
  std::FILE* out_;
  int step_digits_ = 1;
  int64_t total_steps_ = 0;
};

}  // namespace fp8::train_cli
