// The host memory one rank of a job needs, as placement compares it with what a worker
// offers a rank (fp8-worker --memory-gb).
#pragma once

#include "fp8/v1/job.pb.h"

namespace fp8::server {

// resources.memory_gb where the job states it. Otherwise, on the CPU, the job's memory
// estimate (common/jobspec/memory_estimate.h: a CPU rank's tensors are host memory); 0
// (nothing to check) for a GPU job that states none, whose estimate is GPU memory, which
// workers do not advertise.
double rank_memory_need_gb(const v1::JobSpec& spec);

}  // namespace fp8::server
