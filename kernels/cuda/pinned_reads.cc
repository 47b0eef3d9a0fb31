#include "cuda/pinned_reads.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_status.h"

namespace fp8::cuda {

class PinnedReads::Read final : public QueuedRead {
 public:
  Read(PinnedReads& owner, void* slot, size_t bytes, cudaEvent_t arrived)
      : owner_(owner), slot_(slot), bytes_(bytes), arrived_(arrived) {}
  ~Read() override {
    // The slot goes back only once the copy into it has run.
    (void)cudaEventSynchronize(arrived_);
    (void)cudaEventDestroy(arrived_);
    owner_.give_back(slot_);
  }
  Read(const Read&) = delete;
  Read& operator=(const Read&) = delete;

  absl::Status wait(void* dst) override {
    if (dst == nullptr) return absl::InvalidArgumentError("QueuedRead::wait: dst is null");
    if (auto s = cuda_status(cudaEventSynchronize(arrived_), "cudaEventSynchronize (a queued read)"); !s.ok()) {
      return s;
    }
    std::memcpy(dst, slot_, bytes_);
    return absl::OkStatus();
  }

 private:
  PinnedReads& owner_;
  void* slot_;
  size_t bytes_;
  cudaEvent_t arrived_;
};

PinnedReads::~PinnedReads() {
  for (void* chunk : chunks_) (void)cudaFreeHost(chunk);
}

void PinnedReads::give_back(void* slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

absl::StatusOr<std::unique_ptr<QueuedRead>> PinnedReads::read(const void* src, size_t bytes) {
  void* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      void* chunk = nullptr;
      if (auto s = cuda_status(cudaMallocHost(&chunk, kSlotBytes * kSlotsPerChunk), "cudaMallocHost (queued reads)");
          !s.ok()) {
        return s;
      }
      chunks_.push_back(chunk);
      for (size_t i = 0; i < kSlotsPerChunk; ++i) free_.push_back(static_cast<char*>(chunk) + i * kSlotBytes);
    }
    slot = free_.back();
    free_.pop_back();
  }
  cudaEvent_t arrived = nullptr;
  cudaError_t e = cudaMemcpyAsync(slot, src, bytes, cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&arrived, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(arrived, stream_);
  if (e != cudaSuccess) {
    if (arrived != nullptr) (void)cudaEventDestroy(arrived);
    give_back(slot);  // nothing was queued into it, or the stream is broken
    return cuda_status(e, "a queued read");
  }
  return std::unique_ptr<QueuedRead>(new Read(*this, slot, bytes, arrived));
}

}  // namespace fp8::cuda
