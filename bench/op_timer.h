// Marks in a device's queue of work, and the time at which the device reached each: what
// bench/op_breakdown.h measures ops with. On a GPU the marks are CUDA events recorded on
// the device's stream (bench_cuda.h: cuda_op_timer); on the CPU, whose backends finish
// every call before it returns, the host clock read at each mark (host_op_timer).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fp8::bench {

class OpTimer {
 public:
  virtual ~OpTimer() = default;
  // A mark after the work queued so far.
  virtual absl::Status mark() = 0;
  // Whether the device has already passed the last mark (false before the first, and where
  // the device cannot say): work queued now finds it idle, waiting for the host.
  virtual bool passed_last_mark() { return false; }
  // Waits for the device to pass the last mark, then returns the seconds from the first
  // mark to each mark, in order, and forgets them all.
  virtual absl::StatusOr<std::vector<double>> take() = 0;
};

std::unique_ptr<OpTimer> host_op_timer();

}  // namespace fp8::bench
