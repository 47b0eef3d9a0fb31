// The memory of one GPU, which a CUDA worker offers to its rank (--memory-gb's default on
// a GPU slot: the scheduler places a GPU job by its per-rank estimate against it).
#pragma once

#include "absl/status/statusor.h"

namespace fp8::worker {

// cudaGetDeviceProperties' totalGlobalMem of GPU `index`, in GiB. Unavailable with the
// runtime's reason when it cannot tell; FailedPrecondition in a build without CUDA.
absl::StatusOr<double> cuda_device_memory_gb(int index);

}  // namespace fp8::worker
