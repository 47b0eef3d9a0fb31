// fp8-train's training log: one line per report of the training loop, through the
// product's log (common/log/log.h: on stdout, with time and level, as text or json). The
// messages keep a fixed format that reads well in a terminal and greps well in a file.
#pragma once

#include "worker/engine/train/train_observer.h"

namespace fp8::train_cli {

class ConsoleObserver final : public engine::TrainObserver {
 public:
  void on_start(const engine::TrainStart& s) override;
  void on_step(const engine::StepReport& r) override;
  void on_checkpoint(int64_t step, const std::filesystem::path& dir) override;
  void on_warning(const std::string& w) override;
  void on_finish(const engine::TrainSummary& s) override;

 private:
  int step_digits_ = 1;
  int64_t total_steps_ = 0;
};

}  // namespace fp8::train_cli
