// The events a job's life records (JobEvent), built in one place so that every state
// change is stored the same way. Sequence numbers are assigned by the store.
#pragma once

#include <cstdint>
#include <string>

#include "fp8/v1/job_service.pb.h"

namespace fp8::server {

int64_t now_unix_ms();

bool is_final(v1::Job::State state);

v1::JobEvent state_change_event(const std::string& job_id, v1::Job::State previous, v1::Job::State current,
                              const std::string& reason);
v1::JobEvent attempt_started_event(const std::string& job_id, const v1::Attempt& attempt);
v1::JobEvent attempt_ended_event(const std::string& job_id, const v1::Attempt& attempt);
v1::JobEvent progress_job_event(const std::string& job_id, int attempt, const v1::TrainingProgress& progress);
v1::JobEvent numerics_job_event(const std::string& job_id, const v1::NumericsEvent& numerics);

}  // namespace fp8::server
