// CUDA runtime errors as absl::Status, and the device guard every backend method enters.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cuda/cast_kernels.h"

namespace fp8::cuda {

// "cudaMemcpyAsync: invalid argument (cudaErrorInvalidValue)". Out-of-memory becomes
// ResourceExhausted so callers can tell it from a broken device.
inline absl::Status cuda_status(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(call, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

inline absl::Status cuda_status(const LaunchResult& r) {
  return cuda_status(r.error, r.call != nullptr ? r.call : "kernel launch");
}

// Makes `device` current for the guard's lifetime and restores the caller's device after,
// so a backend on device 1 neither depends on nor disturbs the thread's current device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return;
    status_ = cuda_status(cudaSetDevice(device), "cudaSetDevice");
    switched_ = status_.ok();
  }
  ~DeviceGuard() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace fp8::cuda
