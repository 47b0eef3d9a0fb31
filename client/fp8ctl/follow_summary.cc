#include "client/fp8ctl/follow_summary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fp8ctl/format.h"

namespace fp8::ctl {

void FollowSummary::on_event(const v1::JobEvent& event) {
  switch (event.event_case()) {
    case v1::JobEvent::kAttemptStarted: {
      const v1::AttemptStarted& a = event.attempt_started();
      AttemptWork& w = attempts_[a.attempt()];
      w.ranks = a.ranks_size();
      w.resumed_from = a.resumed_from_step();
      w.last_step = std::max(w.last_step, a.resumed_from_step());
      if (first_attempt_ms_ == 0) first_attempt_ms_ = event.time_unix_ms();
      break;
    }
    case v1::JobEvent::kProgress: {
      const v1::TrainingProgress& p = event.progress().progress();
      auto it = attempts_.find(event.progress().attempt());
      if (it != attempts_.end()) it->second.last_step = std::max(it->second.last_step, p.step());
      if (!first_.has_value()) first_ = p;
      last_ = p;
      if (p.has_val_loss()) val_ = {p.step(), p.val_loss()};
      break;
    }
    case v1::JobEvent::kNumerics:
      numerics_.add(event);
      break;
    case v1::JobEvent::kStateChange:
      if (is_final(event.state_change().current())) {
        outcome_ = event.state_change().current();
        end_ms_ = event.time_unix_ms();
      }
      break;
    default:
      break;
  }
}

int64_t FollowSummary::tokens() const {
  int64_t total = 0;
  for (const auto& [number, w] : attempts_) {
    // Tensor-parallel ranks train one batch together: it counts once.
    const int64_t data_parallel = w.ranks > 0 ? std::max(1, w.ranks / tensor_parallel_) : 0;
    total += std::max<int64_t>(0, w.last_step - w.resumed_from) * data_parallel * tokens_per_rank_step_;
  }
  return total;
}

std::string FollowSummary::render() const {
  auto item = [](const std::string& name, const std::string& value) {
    return absl::StrFormat("  %-12s%s\n", name, value);
  };
  std::string out = "Summary:\n";
  const int64_t step = last_.has_value() ? last_->step() : 0;
  absl::StrAppend(&out, item("outcome", absl::StrCat(outcome_.has_value() ? job_state_name(*outcome_) : "-",
                                                       " at step ", step,
                                                       total_steps_ > 0 ? absl::StrCat("/", total_steps_) : "")));
  if (first_.has_value()) {
    absl::StrAppend(&out, item("loss", absl::StrFormat("%.4f -> %.4f (step %d -> %d)", first_->loss(), last_->loss(),
                                                       first_->step(), last_->step())));
  } else {
    absl::StrAppend(&out, item("loss", "- (no progress reported)"));
  }
  absl::StrAppend(&out, item("validation", val_.has_value() ? absl::StrFormat("%.4f (step %d)", val_->second,
                                                                              val_->first)
                                                            : std::string("- (no evaluation ran)")));
  absl::StrAppend(&out, item("tokens", si_rate(static_cast<double>(tokens()))));
  absl::StrAppend(&out, item("wall time", first_attempt_ms_ > 0 && end_ms_ >= first_attempt_ms_
                                              ? clock_duration(static_cast<double>(end_ms_ - first_attempt_ms_) / 1000.0)
                                              : std::string("-")));
  absl::StrAppend(&out, item("restarts", absl::StrCat(restarts())));
  if (numerics_.events() == 0) {
    absl::StrAppend(&out, item("numerics", "no events"));
    return out;
  }
  absl::StrAppend(&out, item("numerics", absl::StrCat(numerics_.events(), " events of ", numerics_.groups().size(),
                                                      " kinds (fp8ctl events ID lists each)")));
  for (const NumericsGroup& g : numerics_.groups()) {
    absl::StrAppend(&out, "    ", group_name(g), ": ", g.count, " (", step_span(g), ")\n");
  }
  return out;
}

}  // namespace fp8::ctl
