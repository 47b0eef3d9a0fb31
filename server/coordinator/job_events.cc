#include "server/coordinator/job_events.h"

#include <chrono>

namespace fp8::server {
namespace {

v1::JobEvent base(const std::string& job_id) {
  v1::JobEvent e;
  e.set_job_id(job_id);
  e.set_time_unix_ms(now_unix_ms());
  return e;
}

}  // namespace

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_final(v1::Job::State state) {
  return state == v1::Job::SUCCEEDED || state == v1::Job::FAILED || state == v1::Job::CANCELLED;
}

v1::JobEvent state_change_event(const std::string& job_id, v1::Job::State previous, v1::Job::State current,
                              const std::string& reason) {
  v1::JobEvent e = base(job_id);
  e.mutable_state_change()->set_previous(previous);
  e.mutable_state_change()->set_current(current);
  e.mutable_state_change()->set_reason(reason);
  return e;
}

v1::JobEvent attempt_started_event(const std::string& job_id, const v1::Attempt& attempt) {
  v1::JobEvent e = base(job_id);
  auto* started = e.mutable_attempt_started();
  started->set_attempt(attempt.number());
  *started->mutable_ranks() = attempt.ranks();
  started->set_resumed_from_step(attempt.resumed_from_step());
  return e;
}

v1::JobEvent attempt_ended_event(const std::string& job_id, const v1::Attempt& attempt) {
  v1::JobEvent e = base(job_id);
  e.mutable_attempt_ended()->set_attempt(attempt.number());
  e.mutable_attempt_ended()->set_state(attempt.state());
  e.mutable_attempt_ended()->set_reason(attempt.end_reason());
  return e;
}

v1::JobEvent progress_job_event(const std::string& job_id, int attempt, const v1::TrainingProgress& progress) {
  v1::JobEvent e = base(job_id);
  e.mutable_progress()->set_attempt(attempt);
  *e.mutable_progress()->mutable_progress() = progress;
  return e;
}

v1::JobEvent numerics_job_event(const std::string& job_id, const v1::NumericsEvent& numerics) {
  v1::JobEvent e = base(job_id);
  *e.mutable_numerics() = numerics;
  return e;
}

}  // namespace fp8::server
