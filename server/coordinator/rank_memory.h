// The memory one rank of a job needs, as placement compares it with what a worker offers
// a rank (fp8-worker --memory-gb: host memory on a CPU worker, its GPU's on a CUDA one).
#pragma once

#include "fp8/v1/job.pb.h"

namespace fp8::server {

// resources.memory_gb where the job states it. Otherwise the job's memory estimate
// (common/jobspec/memory_estimate.h): a CPU rank's tensors are host memory, a GPU rank's
// are its GPU's.
double rank_memory_need_gb(const v1::JobSpec& spec);

}  // namespace fp8::server
