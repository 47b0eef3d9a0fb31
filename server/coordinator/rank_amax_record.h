// A cast's RankAmax as the v1::RankAmaxes message the store keeps and the job API shows.
#pragma once

#include <string>

#include "fp8/v1/job_service.pb.h"
#include "server/coordinator/rank_amax.h"

namespace fp8::server {

// `open_step`: history ends with the open step's largest amax too (what fp8ctl shows);
// without it, history holds the closed steps alone (what the store keeps, so that
// rank_amax_from_record() gives the same RankAmax back).
v1::RankAmaxes rank_amax_record(const std::string& layer, int operand, const RankAmax& ranks, bool open_step);
RankAmax rank_amax_from_record(const v1::RankAmaxes& record);

}  // namespace fp8::server
