// Where tensors live and what computes on them: one fp8::Backend (memory, copies, fp8
// casts and GEMMs) and the model's other kernels (fp8::ModelOps). Model code holds a
// Device and never asks which one it is.
//
// A CUDA device runs everything on one stream of its own (non-blocking): the backend's
// casts and GEMMs and the model ops are queued there in program order, so they need no
// events between them. Collectives run on the process group's own stream (collectives/).
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
  // CUDA device `ordinal` with a compute stream of its own, its model ops built with
  // `options`. Unavailable without CUDA or that GPU.
  static absl::StatusOr<std::unique_ptr<Device>> cuda(int ordinal = 0, const CudaModelOpsOptions& options = {});

  // "cpu", "cuda:0".
  const std::string& name() const { return name_; }
  bool is_cuda() const { return backend_->is_cuda(); }
  // The CUDA ordinal; -1 on the CPU.
  int ordinal() const { return ordinal_; }
  // The cudaStream_t everything of this device is queued on; null on the CPU.
  void* stream() const { return stream_.get(); }
  Backend& backend() const { return *backend_; }

  bool has_model_ops() const { return ops_ != nullptr; }
  // FailedPrecondition naming the device when it has no model kernels.
  absl::StatusOr<ModelOps*> model_ops() const;

  Device(std::string name, Backend* backend, ModelOps* ops) : name_(std::move(name)), backend_(backend), ops_(ops) {}
  ~Device();

 private:
  std::string name_;
  int ordinal_ = -1;
  Backend* backend_;
  ModelOps* ops_;
  // Set when this device made its own: destroyed ops and backend first, the stream last.
  std::shared_ptr<void> stream_;
  std::unique_ptr<Backend> owned_backend_;
  std::unique_ptr<ModelOps> owned_ops_;
};

}  // namespace fp8::engine
