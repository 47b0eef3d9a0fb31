// fp8-train's training log: one line per report of the training loop, through the
// product's log (common/log/log.h: on stdout, with time and level, as text or json). The
// messages keep a fixed format that reads well in a terminal and greps well in a file.
#pragma once

#include <string>

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

// The step's `comm` line: "  comm  all-gather 1.20 MB fp8  reduce-scatter 0.34 MB fp32
// all-reduce 3  2.1 ms (0.4 ms exposed)" for FSDP, "  comm  tensor all-reduce 12  3.10 MB
// 4.0 ms" for tensor parallelism (all of its time exposed), both on one line when a job
// has both axes.
std::string comm_text(const engine::StepComm& c);

}  // namespace fp8::train_cli
