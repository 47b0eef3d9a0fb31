// Backend::fence() on CUDA: an event recorded on the backend's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "fp8/fp8.h"

namespace fp8::cuda {

class EventFence final : public Fence {
 public:
  // Records an event after the work queued on `stream` so far (device current).
  static absl::StatusOr<std::unique_ptr<Fence>> record(int device, cudaStream_t stream);
  ~EventFence() override;

  // cudaEventSynchronize: this thread sleeps or spins per the device's flags until then.
  absl::Status wait() override;

 private:
  EventFence(int device, cudaEvent_t event) : device_(device), event_(event) {}

  const int device_;
  const cudaEvent_t event_;
};

}  // namespace fp8::cuda
