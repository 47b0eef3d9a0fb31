#include "cuda/event_fence.h"

#include "cuda/cuda_status.h"

namespace fp8::cuda {

absl::StatusOr<std::unique_ptr<Fence>> EventFence::record(int device, cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  // No timing: a timing event costs more to record and nothing here reads its time.
  if (auto s = cuda_status(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      !s.ok()) {
    return s;
  }
  if (auto s = cuda_status(cudaEventRecord(event, stream), "cudaEventRecord"); !s.ok()) {
    cudaEventDestroy(event);
    return s;
  }
  return std::unique_ptr<Fence>(new EventFence(device, event));
}

EventFence::~EventFence() {
  DeviceGuard guard(device_);
  cudaEventDestroy(event_);  // safe while pending: the event is released once it completes
}

absl::Status EventFence::wait() {
  DeviceGuard guard(device_);
  if (!guard.status().ok()) return guard.status();
  return cuda_status(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

}  // namespace fp8::cuda
