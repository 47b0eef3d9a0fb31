// BackendBuffer: backend memory the fp8 core owns (a layer's casts, scales and amax slots;
// FSDP's weight scales), grown on demand and freed with its owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/fp8.h"

namespace fp8::engine {

// Backend memory owned by one layer (or FSDP's weight scales). It grows on demand and never
// shrinks, so steps after the first allocate nothing.
class BackendBuffer {
 public:
  explicit BackendBuffer(Backend& backend) : backend_(&backend) {}
  ~BackendBuffer() { release(); }
  BackendBuffer(BackendBuffer&& o) noexcept
      : backend_(o.backend_), data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&&) = delete;
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  // At least `bytes`; the contents are lost when it grows.
  absl::Status reserve(size_t bytes) { return grow(bytes, 0); }

  // At least `bytes`, keeping the first `keep_floats` fp32 values when it grows.
  absl::Status grow(size_t bytes, int64_t keep_floats) {
    if (bytes <= capacity_) return absl::OkStatus();
    absl::StatusOr<void*> fresh = backend_->allocate(bytes);
    if (!fresh.ok()) return fresh.status();
    if (keep_floats > 0) {
      // A same-type convert is the backend's device-to-device copy.
      if (auto s = backend_->convert(data_, DType::kFloat32, *fresh, DType::kFloat32, keep_floats); !s.ok()) {
        backend_->deallocate(*fresh);
        return s;
      }
    }
    release();
    data_ = *fresh;
    capacity_ = bytes;
    return absl::OkStatus();
  }

  size_t capacity() const { return capacity_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void release() {
    if (data_ != nullptr) backend_->deallocate(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

  Backend* backend_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

inline size_t float_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

}  // namespace fp8::engine
