#include "worker/engine/tensor/device.h"

#include "absl/strings/str_cat.h"

namespace fp8::engine {

Device& Device::cpu() {
  static Device device("cpu", &cpu_backend(), &cpu_model_ops());
  return device;
}

absl::StatusOr<std::unique_ptr<Device>> Device::cuda(int ordinal) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_cuda_backend(ordinal);
  if (!backend.ok()) return backend.status();
  Backend* raw = backend->get();
  return std::make_unique<Device>(absl::StrCat("cuda:", ordinal), raw, nullptr, std::move(*backend));
}

absl::StatusOr<ModelOps*> Device::model_ops() const {
  if (ops_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", name_,
                     " has no model kernels yet (embedding, norms, attention, loss, optimizer run on the CPU "
                     "device only; on CUDA only Float8Linear runs so far)"));
  }
  return ops_;
}

}  // namespace fp8::engine
