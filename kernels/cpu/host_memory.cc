#include "cpu/host_memory.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cpu/transpose.h"

namespace fp8::cpu {

absl::StatusOr<void*> HostMemoryBackend::allocate(size_t bytes) {
  constexpr size_t kAlign = 256;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
  return p;
}

void HostMemoryBackend::deallocate(void* p) { std::free(p); }

absl::Status HostMemoryBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy_from_host: null pointer");
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status HostMemoryBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy_to_host: null pointer");
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status HostMemoryBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy: null pointer");
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status HostMemoryBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("fill_zero: null pointer");
  std::memset(dst, 0, bytes);
  return absl::OkStatus();
}

absl::Status HostMemoryBackend::transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat("transpose_bytes: negative shape [", rows, ", ", cols, "]"));
  }
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("transpose_bytes: null pointer");
  ::fp8::cpu::transpose_bytes(src, /*ld_src=*/cols, rows, cols, dst, /*ld_dst=*/rows);
  return absl::OkStatus();
}

}  // namespace fp8::cpu
