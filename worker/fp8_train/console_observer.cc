#include "worker/fp8_train/console_observer.h"

#include <string>

#include "absl/strings/str_format.h"

namespace fp8::train_cli {

void ConsoleObserver::on_start(const engine::TrainStart& s) {
  step_digits_ = static_cast<int>(std::to_string(s.total_steps).size());
  std::fprintf(out_, "job %s: %s, %.2fM parameters, on %s\n", s.job.c_str(), s.model.c_str(),
               static_cast<double>(s.parameters) / 1e6, s.device.c_str());
  std::fprintf(out_, "fp8 %s\n", s.fp8.c_str());
  if (!s.sharding.empty()) std::fprintf(out_, "%s\n", s.sharding.c_str());
  if (s.resumed_from) std::fprintf(out_, "resumed from %s\n", s.resumed_from->c_str());
  total_steps_ = s.total_steps;
  if (s.first_step <= s.total_steps) {  // otherwise on_finish says there is nothing to do
    std::fprintf(out_, "training steps %lld..%lld, %lld tokens per step\n", static_cast<long long>(s.first_step),
                 static_cast<long long>(s.total_steps), static_cast<long long>(s.tokens_per_step));
  }
  std::fflush(out_);
}

namespace {

// "812 KiB", "37.5 MiB", "61.20 GiB".
std::string memory_text(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b < 1024.0 * 1024.0) return absl::StrFormat("%.0f KiB", b / 1024.0);
  if (b < 1024.0 * 1024.0 * 1024.0) return absl::StrFormat("%.1f MiB", b / (1024.0 * 1024.0));
  return absl::StrFormat("%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

void ConsoleObserver::on_step(const engine::StepReport& r) {
  const std::string val = r.val_loss ? absl::StrFormat("  val %.4f", *r.val_loss) : "";
  std::fprintf(out_, "step %*lld/%lld  loss %.4f%s  lr %.2e  grad_norm %.3f  %.0f tok/s  %.1f ms/step  peak %s\n",
               step_digits_, static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.loss,
               val.c_str(), r.lr, r.grad_norm, r.tokens_per_second, r.step_ms,
               memory_text(r.peak_memory_bytes).c_str());
  if (r.comm) {
    // One rank's traffic: gathered bytes by type, reduce-scattered gradients, all-reduces.
    const engine::StepComm& c = *r.comm;
    std::fprintf(out_,
                 "  comm  all-gather %.2f MB fp8 + %.2f MB fp32  reduce-scatter %.2f MB  all-reduce %.0f  "
                 "%.1f ms (%.1f ms exposed)\n",
                 c.all_gather_fp8_bytes / 1e6, c.all_gather_f32_bytes / 1e6, c.reduce_scatter_bytes / 1e6,
                 c.all_reduces, c.comm_ms, c.exposed_ms);
  }
  std::fflush(out_);
}

void ConsoleObserver::on_checkpoint(int64_t step, const std::filesystem::path& dir) {
  std::fprintf(out_, "checkpoint at step %lld: %s\n", static_cast<long long>(step), dir.c_str());
  std::fflush(out_);
}

void ConsoleObserver::on_warning(const std::string& w) {
  std::fprintf(out_, "warning: %s\n", w.c_str());
  std::fflush(out_);
}

void ConsoleObserver::on_finish(const engine::TrainSummary& s) {
  if (s.last_step < s.first_step) {
    // s.last_step is the step the checkpoint left off at, which a job resumed with fewer
    // train.steps may have passed.
    if (s.last_step > total_steps_) {
      std::fprintf(out_, "nothing to do: resumed at step %lld, past the job's last step (%lld)\n",
                   static_cast<long long>(s.last_step), static_cast<long long>(total_steps_));
    } else {
      std::fprintf(out_, "nothing to do: the job's last step (%lld) is already done\n",
                   static_cast<long long>(s.last_step));
    }
    std::fflush(out_);
    return;
  }
  std::fprintf(out_, "%s: steps %lld..%lld in %.1f s, %lld tokens (%.0f tok/s)\n",
               s.stopped_early ? "stopped" : "done", static_cast<long long>(s.first_step),
               static_cast<long long>(s.last_step), s.seconds, static_cast<long long>(s.tokens),
               static_cast<double>(s.tokens) / s.seconds);
  if (s.first_loss && s.last_loss) {
    std::fprintf(out_, "loss %.4f -> %.4f (%+.1f%%)", *s.first_loss, *s.last_loss,
                 100.0 * (*s.last_loss - *s.first_loss) / *s.first_loss);
    if (s.last_val_loss) std::fprintf(out_, ", validation %.4f (best %.4f)", *s.last_val_loss, *s.best_val_loss);
    std::fprintf(out_, "\n");
  }
  if (s.last_checkpoint) std::fprintf(out_, "last checkpoint: %s\n", s.last_checkpoint->c_str());
  std::fflush(out_);
}

}  // namespace fp8::train_cli
