// The table of `fp8ctl list`: ID, NAME, OWNER, STATE, PROGRESS, RECIPE, WORLD, SUBMITTED,
// AGE; -o wide adds DEVICE, PRIORITY, LOSS, ATTEMPTS, RESTARTS LEFT, CHECKPOINT, FINISHED
// and REASON. Pure, so that the unit test pins it.
#pragma once

#include <cstdint>
#include <string>

#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

std::string jobs_table(const v1::ListJobsResponse& response, int64_t now_unix_ms, bool wide);

// "job/job-3": what -o name prints for a job.
std::string job_name(const std::string& job_id);

}  // namespace fp8::ctl
