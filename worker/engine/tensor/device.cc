#include "worker/engine/tensor/device.h"

#include "absl/strings/str_cat.h"

namespace fp8::engine {

Device& Device::cpu() {
  static Device device("cpu", &cpu_backend(), &cpu_model_ops());
  return device;
}

absl::StatusOr<std::unique_ptr<Device>> Device::cuda(int ordinal, const CudaModelOpsOptions& options) {
  absl::StatusOr<std::shared_ptr<void>> stream = make_cuda_stream(ordinal);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_cuda_backend(ordinal, stream->get());
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::unique_ptr<ModelOps>> ops = make_cuda_model_ops(ordinal, stream->get(), options);
  if (!ops.ok()) return ops.status();
  auto device = std::make_unique<Device>(absl::StrCat("cuda:", ordinal), backend->get(), ops->get());
  device->ordinal_ = ordinal;
  device->stream_ = std::move(*stream);
  device->owned_backend_ = std::move(*backend);
  device->owned_ops_ = std::move(*ops);
  return device;
}

Device::~Device() {
  // Members go in reverse order of declaration, but be explicit: kernels first, then the
  // stream they were queued on.
  owned_ops_.reset();
  owned_backend_.reset();
  stream_.reset();
}

absl::StatusOr<ModelOps*> Device::model_ops() const {
  if (ops_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("device ", name_, " has no model kernels"));
  }
  return ops_;
}

}  // namespace fp8::engine
