#include "client/fp8ctl/follow_printer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/fp8ctl/format.h"

namespace fp8::ctl {

void EtaEstimator::observe(int32_t attempt, int64_t step, int64_t time_unix_ms) {
  if (attempt != attempt_ || step < last_step_) {
    attempt_ = attempt;
    first_step_ = last_step_ = step;
    first_ms_ = last_ms_ = time_unix_ms;
    return;
  }
  last_step_ = step;
  last_ms_ = time_unix_ms;
}

std::optional<double> EtaEstimator::seconds_left(int64_t total_steps) const {
  if (attempt_ < 0 || total_steps <= 0) return std::nullopt;
  if (last_step_ >= total_steps) return 0.0;
  const int64_t steps = last_step_ - first_step_;
  const int64_t ms = last_ms_ - first_ms_;
  if (steps <= 0 || ms <= 0) return std::nullopt;
  return static_cast<double>(total_steps - last_step_) * (static_cast<double>(ms) / 1000.0) /
         static_cast<double>(steps);
}

std::string progress_line(const ProgressLineInput& in) {
  std::string line = absl::StrCat("step ", in.step);
  if (in.total_steps > 0) {
    const double pct = 100.0 * static_cast<double>(in.step) / static_cast<double>(in.total_steps);
    absl::StrAppend(&line, "/", in.total_steps, absl::StrFormat(" (%.0f%%)", std::floor(pct)));
  }
  absl::StrAppend(&line, absl::StrFormat("  loss %.4f", in.loss));
  if (in.val_loss.has_value()) absl::StrAppend(&line, absl::StrFormat("  val %.4f", *in.val_loss));
  absl::StrAppend(&line, "  tok/s ", si_rate(in.tokens_per_second));
  absl::StrAppend(&line, "  ETA ", in.eta_seconds.has_value() ? clock_duration(*in.eta_seconds) : "?");
  return line;
}

std::string progress_bar(int64_t step, int64_t total, int width) {
  const double done = total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(std::floor(done * width));
  return absl::StrCat("[", std::string(static_cast<size_t>(filled), '#'),
                      std::string(static_cast<size_t>(width - filled), '.'), "]");
}

FollowPrinter::FollowPrinter(std::ostream& out, bool terminal, int64_t total_steps, int data_parallel_ranks,
                             int64_t tokens_per_rank_step, int tensor_parallel)
    : out_(out),
      terminal_(terminal),
      total_steps_(total_steps),
      data_parallel_ranks_(data_parallel_ranks < 1 ? 1 : data_parallel_ranks),
      summary_(total_steps, tokens_per_rank_step, tensor_parallel) {}

void FollowPrinter::line(int64_t time_unix_ms, const std::string& text) {
  // Over a live progress line: clear it, print the event, then draw the progress again.
  if (terminal_ && !live_.empty()) out_ << "\r\x1b[K";
  out_ << local_time(time_unix_ms, /*with_date=*/false) << "  " << text << "\n";
  if (terminal_ && !live_.empty()) out_ << live_;
  out_.flush();
}

void FollowPrinter::progress(const v1::JobEvent& event) {
  const v1::ProgressEvent& pe = event.progress();
  const v1::TrainingProgress& p = pe.progress();
  eta_.observe(pe.attempt(), p.step(), p.time_unix_ms());
  ProgressLineInput in;
  in.step = p.step();
  in.total_steps = total_steps_;
  in.loss = p.loss();
  if (p.has_val_loss()) in.val_loss = p.val_loss();
  in.tokens_per_second = p.tokens_per_second() * data_parallel_ranks_;
  in.eta_seconds = eta_.seconds_left(total_steps_);
  const std::string text = progress_line(in);
  if (terminal_) {
    live_ = total_steps_ > 0 ? absl::StrCat(progress_bar(in.step, total_steps_), " ", text) : text;
    out_ << "\r\x1b[K" << live_;
    out_.flush();
  } else {
    line(event.time_unix_ms(), text);
  }
}

void FollowPrinter::on_event(const v1::JobEvent& event) {
  summary_.on_event(event);
  switch (event.event_case()) {
    case v1::JobEvent::kStateChange: {
      const v1::JobStateChange& c = event.state_change();
      // The first event of a job has no previous state: "state QUEUED: submitted".
      std::string text = c.previous() == v1::Job::STATE_UNSPECIFIED
                             ? absl::StrCat("state ", job_state_name(c.current()))
                             : absl::StrCat("state ", job_state_name(c.previous()), " -> ", job_state_name(c.current()));
      if (!c.reason().empty()) absl::StrAppend(&text, ": ", c.reason());
      if (is_final(c.current())) {
        final_state_ = c.current();
        final_reason_ = c.reason();
        finish();  // the progress line stays above the final state line
      }
      line(event.time_unix_ms(), text);
      break;
    }
    case v1::JobEvent::kAttemptStarted: {
      const v1::AttemptStarted& a = event.attempt_started();
      std::vector<std::string> ranks;
      for (const v1::RankPlacement& r : a.ranks()) {
        ranks.push_back(absl::StrCat("rank ", r.rank(), " on ", r.worker_id(), " (", r.device_name(), ")"));
      }
      std::string text = absl::StrCat("attempt ", a.attempt(), " started: ", absl::StrJoin(ranks, ", "));
      absl::StrAppend(&text, a.resumed_from_step() > 0 ? absl::StrCat("; resuming from step ", a.resumed_from_step())
                                                         : "; from scratch");
      line(event.time_unix_ms(), text);
      break;
    }
    case v1::JobEvent::kAttemptEnded: {
      const v1::AttemptEnded& a = event.attempt_ended();
      std::string text = absl::StrCat("attempt ", a.attempt(), " ended ", attempt_state_name(a.state()));
      if (!a.reason().empty()) absl::StrAppend(&text, ": ", a.reason());
      line(event.time_unix_ms(), text);
      break;
    }
    case v1::JobEvent::kNumerics: {
      if (!numerics_.add(event)) break;  // a repeat: counted in the summary
      const v1::NumericsEvent& n = event.numerics();
      line(event.time_unix_ms(),
           absl::StrCat("numerics: ", n.message().empty() ? numerics_kind_name(n.kind()) : n.message(),
                        " (repeats of it are counted in the summary)"));
      break;
    }
    case v1::JobEvent::kProgress:
      progress(event);
      break;
    case v1::JobEvent::EVENT_NOT_SET:
      break;
  }
}

void FollowPrinter::print_summary() {
  finish();
  out_ << summary_.render();
  out_.flush();
}

void FollowPrinter::finish() {
  if (terminal_ && !live_.empty()) {
    out_ << "\n";
    out_.flush();
    live_.clear();
  }
}

}  // namespace fp8::ctl
