// The peak FLOP rate a rank's model FLOPs utilisation (TrainingProgress.mfu) is measured
// against: for a Hopper GPU, NVIDIA's data-sheet dense tensor-core rate of the
// recipe's GEMMs (fp8 for the fp8 recipes; bf16 or fp32 for `none` by
// train.compute_dtype); on the CPU, one sgemm timed now on this rank's threads, the
// best a GEMM does here.
#pragma once

#include <string>

#include "fp8/v1/job.pb.h"
#include "worker/engine/tensor/device.h"

namespace fp8::train_cli {

struct DevicePeak {
  double flops_per_second = 0;  // 0: unknown (a GPU outside the table)
  std::string basis;            // for the log: which data-sheet rate, or "sgemm measured here"
};

DevicePeak device_peak(const v1::JobSpec& spec, const engine::Device& device);

}  // namespace fp8::train_cli
