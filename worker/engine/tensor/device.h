// Where tensors live and what computes on them: one fp8::Backend (memory, copies, fp8
// casts and GEMMs) and, where the device has them, the model's other kernels
// (fp8::ModelOps). Model code holds a Device and never asks which one it is.
//
// The CPU device has both. The CUDA device has the Backend only for now: Float8Linear
// runs on it, the whole-model CUDA kernels are a later milestone, and asking for them
// is a clear error rather than a crash.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fp8/fp8.h"
#include "fp8/model_ops.h"

namespace fp8::engine {

class Device {
 public:
  // The process-wide CPU device.
  static Device& cpu();
  // CUDA device `ordinal` on its default stream. Unavailable without CUDA or a GPU.
  static absl::StatusOr<std::unique_ptr<Device>> cuda(int ordinal = 0);

  // "cpu", "cuda:0".
  const std::string& name() const { return name_; }
  bool is_cuda() const { return backend_->is_cuda(); }
  Backend& backend() const { return *backend_; }

  bool has_model_ops() const { return ops_ != nullptr; }
  // FailedPrecondition naming the device when it has no model kernels.
  absl::StatusOr<ModelOps*> model_ops() const;

  Device(std::string name, Backend* backend, ModelOps* ops, std::unique_ptr<Backend> owned = nullptr)
      : name_(std::move(name)), backend_(backend), ops_(ops), owned_(std::move(owned)) {}

 private:
  std::string name_;
  Backend* backend_;
  ModelOps* ops_;
  std::unique_ptr<Backend> owned_;  // set when this device made its backend
};

}  // namespace fp8::engine
