// The default Backend::fence() and Backend::queue_read(): for backends whose calls finish
// before they return (the host ones), a fence has passed already and a read is done at once.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fp8/fp8.h"

namespace fp8 {
namespace {

class PassedFence final : public Fence {
 public:
  absl::Status wait() override { return absl::OkStatus(); }
};

// The bytes, read when the read was queued.
class ReadAlready final : public QueuedRead {
 public:
  explicit ReadAlready(std::vector<unsigned char> bytes) : bytes_(std::move(bytes)) {}
  absl::Status wait(void* dst) override {
    if (dst == nullptr) return absl::InvalidArgumentError("QueuedRead::wait: dst is null");
    if (!bytes_.empty()) std::memcpy(dst, bytes_.data(), bytes_.size());
    return absl::OkStatus();
  }

 private:
  std::vector<unsigned char> bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Fence>> Backend::fence() { return std::unique_ptr<Fence>(new PassedFence()); }

absl::StatusOr<std::unique_ptr<QueuedRead>> Backend::queue_read(const void* src, size_t bytes) {
  if (bytes > kMaxQueuedReadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue_read: ", bytes, " bytes; at most ", kMaxQueuedReadBytes, " (for values, not tensors)"));
  }
  if (src == nullptr && bytes > 0) return absl::InvalidArgumentError("queue_read: src is null");
  std::vector<unsigned char> host(bytes);
  if (bytes > 0) {
    if (absl::Status s = copy_to_host(host.data(), src, bytes); !s.ok()) return s;
  }
  return std::unique_ptr<QueuedRead>(new ReadAlready(std::move(host)));
}

}  // namespace fp8
