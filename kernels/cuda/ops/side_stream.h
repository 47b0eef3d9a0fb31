// A second stream beside the caller's, for a launcher whose kernels are independent of
// each other and too uneven to fill the GPU one after another. Internal to
// kernels/cuda/ops.
//
//   SideStream* side;
//   if (LaunchResult r = side_stream(&side); !r.ok()) return r;
//   if (LaunchResult r = side->fork(stream); !r.ok()) return r;  // side waits for stream's queue
//   ... launch on `stream` and on side->stream() ...
//   return side->join(stream);                                   // stream waits for side's queue
//
// What is queued on `stream` after the join runs after both; memory allocated on `stream`
// before the fork may be used on the side stream (stream-ordered allocations stay valid).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/cast_kernels.h"  // LaunchResult

namespace fp8::cuda {

class SideStream {
 public:
  cudaStream_t stream() const { return stream_; }
  LaunchResult fork(cudaStream_t from);
  LaunchResult join(cudaStream_t into);

 private:
  friend LaunchResult side_stream(SideStream** out);
  cudaStream_t stream_ = nullptr;
  cudaEvent_t forked_ = nullptr, joined_ = nullptr;
};

// This thread's side stream on the current device, created on first use. One per thread
// and device: a thread's launches are ordered, so its events are never in two forks at once.
LaunchResult side_stream(SideStream** out);

}  // namespace fp8::cuda
