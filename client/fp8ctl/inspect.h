// The tables of `fp8ctl workers` and `fp8ctl amax`. Pure, so that the unit test pins them.
#pragma once

#include <cstdint>
#include <string>

#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

// The ranks a worker holds: "job-3 r1, job-4 r0"; "(other user)" for a rank of a job the
// caller may not see (its id comes as ""); "-" for none.
std::string worker_ranks_cell(const v1::WorkerInfo& worker);

// How long ago a heartbeat was: "0.4s ago", "12.0s ago", then as age() ("3m ago");
// "never" for 0.
std::string heartbeat_age(int64_t last_heartbeat_unix_ms, int64_t now_unix_ms);

// NAME, DEVICE, ADDRESS, STATE, JOB/RANK, LAST HEARTBEAT; `wide` adds KIND, RANK STATES
// (each rank's, in JOB/RANK's order) and HEARTBEAT AT (local time).
std::string workers_table(const v1::ListWorkersResponse& response, int64_t now_unix_ms, bool wide = false);

// "input", "weight", "grad_output" ("-" when unspecified).
std::string operand_name(v1::AmaxHistory::Operand operand);

// A header line with the step, then LAYER, OPERAND, AMAX (newest), HISTORY MAX, SCALE,
// LEN; or the one-line message for a job with no histories.
std::string amax_report(const std::string& job_id, const v1::GetJobAmaxResponse& response);

// --by-rank: LAYER, OPERAND, STEP, each rank's own amax, which rank's is LARGEST, and the
// run's largest so far (value, rank, step).
std::string amax_by_rank_report(const std::string& job_id, const v1::GetJobAmaxResponse& response);

}  // namespace fp8::ctl
