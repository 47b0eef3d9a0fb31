// The default Backend::fence(): for backends whose calls finish before they return.
#include "fp8/fp8.h"

namespace fp8 {
namespace {

class PassedFence final : public Fence {
 public:
  absl::Status wait() override { return absl::OkStatus(); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Fence>> Backend::fence() { return std::unique_ptr<Fence>(new PassedFence()); }

}  // namespace fp8
