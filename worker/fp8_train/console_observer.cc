#include "worker/fp8_train/console_observer.h"

#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log/log.h"

namespace fp8::train_cli {

void ConsoleObserver::on_start(const engine::TrainStart& s) {
  step_digits_ = static_cast<int>(std::to_string(s.total_steps).size());
  log::info(absl::StrFormat("job %s: %s, %.2fM parameters, on %s", s.job, s.model,
                            static_cast<double>(s.parameters) / 1e6, s.device));
  log::info(absl::StrCat("fp8 ", s.fp8));
  if (!s.sharding.empty()) log::info(s.sharding);
  if (s.resumed_from) log::info(absl::StrCat("resumed from ", s.resumed_from->string()));
  total_steps_ = s.total_steps;
  if (s.first_step <= s.total_steps) {  // otherwise on_finish says there is nothing to do
    log::info(absl::StrCat("training steps ", s.first_step, "..", s.total_steps, ", ", s.tokens_per_step,
                           " tokens per step"));
  }
}

namespace {

// "812 KiB", "37.5 MiB", "61.20 GiB".
std::string memory_text(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b < 1024.0 * 1024.0) return absl::StrFormat("%.0f KiB", b / 1024.0);
  if (b < 1024.0 * 1024.0 * 1024.0) return absl::StrFormat("%.1f MiB", b / (1024.0 * 1024.0));
  return absl::StrFormat("%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
}

struct DtypeBytes {
  double bytes;
  const char* dtype;
};

// "1.20 MB fp8 + 0.34 MB fp32": the types that travelled; "0.00 MB" when none did.
std::string bytes_by_dtype(std::initializer_list<DtypeBytes> parts) {
  std::string text;
  for (const DtypeBytes& p : parts) {
    if (p.bytes <= 0) continue;
    absl::StrAppend(&text, text.empty() ? "" : " + ", absl::StrFormat("%.2f MB %s", p.bytes / 1e6, p.dtype));
  }
  return text.empty() ? std::string("0.00 MB") : text;
}

}  // namespace

void ConsoleObserver::on_step(const engine::StepReport& r) {
  const std::string val = r.val_loss ? absl::StrFormat("  val %.4f", *r.val_loss) : "";
  log::info(absl::StrFormat("step %*d/%d  loss %.4f%s  lr %.2e  grad_norm %.3f  %.0f tok/s  %.1f ms/step  peak %s",
                            step_digits_, r.step, r.total_steps, r.loss, val, r.lr, r.grad_norm,
                            r.tokens_per_second, r.step_ms, memory_text(r.peak_memory_bytes)));
  if (r.comm) log::info(comm_text(*r.comm));
}

std::string comm_text(const engine::StepComm& c) {
  // One rank's traffic, each parallel axis apart. Data-parallel (FSDP): gathered bytes by
  // type, reduce-scattered gradients, all-reduces, and how much of that time compute hid.
  // Tensor-parallel: its all-reduces run on the compute thread, so all of their time is
  // exposed and one figure says it.
  const bool tensor = c.tensor_all_reduces > 0;
  const bool data = !tensor || c.all_gather_fp8_bytes > 0 || c.all_gather_bf16_bytes > 0 ||
                    c.all_gather_f32_bytes > 0 || c.reduce_scatter_bf16_bytes > 0 || c.reduce_scatter_f32_bytes > 0 ||
                    c.all_reduces > 0 || c.comm_ms > 0;
  std::string text = "  comm";
  if (data) {
    absl::StrAppendFormat(&text, "  all-gather %s  reduce-scatter %s  all-reduce %.0f  %.1f ms (%.1f ms exposed)",
                          bytes_by_dtype({{c.all_gather_fp8_bytes, "fp8"},
                                          {c.all_gather_bf16_bytes, "bf16"},
                                          {c.all_gather_f32_bytes, "fp32"}}),
                          bytes_by_dtype({{c.reduce_scatter_bf16_bytes, "bf16"},
                                          {c.reduce_scatter_f32_bytes, "fp32"}}),
                          c.all_reduces, c.comm_ms, c.exposed_ms);
  }
  if (tensor) {
    absl::StrAppendFormat(&text, "  tensor all-reduce %.0f  %.2f MB  %.1f ms", c.tensor_all_reduces,
                          c.tensor_all_reduce_bytes / 1e6, c.tensor_ms);
    // Of which sequence parallelism's gathers (fp8 codes apart) and reduce-scatters.
    if (c.sequence_gather_fp8_bytes > 0 || c.sequence_gather_bytes > 0) {
      absl::StrAppendFormat(&text, " (sequence all-gather %s, reduce-scatter %.2f MB)",
                            bytes_by_dtype({{c.sequence_gather_fp8_bytes, "fp8"},
                                            {c.sequence_gather_bytes, "high precision"}}),
                            c.sequence_reduce_scatter_bytes / 1e6);
    }
  }
  return text;
}

void ConsoleObserver::on_checkpoint(int64_t step, const std::filesystem::path& dir) {
  log::info(absl::StrCat("checkpoint at step ", step, ": ", dir.string()));
}

void ConsoleObserver::on_warning(const std::string& w) {
  log::warn(w);
}

void ConsoleObserver::on_finish(const engine::TrainSummary& s) {
  if (s.last_step < s.first_step) {
    // s.last_step is the step the checkpoint left off at, which a job resumed with fewer
    // train.steps may have passed.
    if (s.last_step > total_steps_) {
      log::info(absl::StrCat("nothing to do: resumed at step ", s.last_step, ", past the job's last step (",
                             total_steps_, ")"));
    } else {
      log::info(absl::StrCat("nothing to do: the job's last step (", s.last_step, ") is already done"));
    }
    return;
  }
  log::info(absl::StrFormat("%s: steps %d..%d in %.1f s, %d tokens (%.0f tok/s)",
                            s.stopped_early ? "stopped" : "done", s.first_step, s.last_step, s.seconds, s.tokens,
                            static_cast<double>(s.tokens) / s.seconds));
  if (s.first_loss && s.last_loss) {
    std::string loss = absl::StrFormat("loss %.4f -> %.4f (%+.1f%%)", *s.first_loss, *s.last_loss,
                                       100.0 * (*s.last_loss - *s.first_loss) / *s.first_loss);
    if (s.last_val_loss) absl::StrAppendFormat(&loss, ", validation %.4f (best %.4f)", *s.last_val_loss, *s.best_val_loss);
    log::info(loss);
  }
  if (s.last_checkpoint) log::info(absl::StrCat("last checkpoint: ", s.last_checkpoint->string()));
}

}  // namespace fp8::train_cli
