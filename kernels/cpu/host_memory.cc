#include "cpu/host_memory.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backend/validate.h"
#include "cpu/transpose.h"
#include "fp8/delayed_state.h"

namespace fp8::cpu {

namespace {
// Each block starts with one aligned header that remembers the size asked for, so that
// deallocate() can count it without a lookup table.
constexpr size_t kAlign = 256;
constexpr size_t kHeader = kAlign;
}  // namespace

absl::StatusOr<void*> HostMemoryBackend::allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  auto* block = static_cast<std::byte*>(std::aligned_alloc(kAlign, kHeader + rounded));
  if (block == nullptr) return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
  std::memcpy(block, &bytes, sizeof(bytes));
  counter_.on_allocate(static_cast<int64_t>(bytes));
  return block + kHeader;
}

void HostMemoryBackend::deallocate(void* p) {
  if (p == nullptr) return;
  std::byte* block = static_cast<std::byte*>(p) - kHeader;
  size_t bytes = 0;
  std::memcpy(&bytes, block, sizeof(bytes));
  counter_.on_deallocate(static_cast<int64_t>(bytes));
  std::free(block);
}

MemoryStats HostMemoryBackend::memory_stats() const {
  MemoryStats s;
  s.allocated = counter_.allocated();
  s.peak_allocated = counter_.peak();
  s.reserved = s.allocated;
  return s;
}

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

absl::Status HostMemoryBackend::record_delayed_amaxes(const DelayedRecordArgs& a) {
  if (auto s = detail::check_record_delayed(a); !s.ok()) return s;
  const int64_t stride = delayed::state_floats(a.history_len);
  for (int64_t i = 0; i < a.count; ++i) {
    float* scale = a.scales + i * a.scale_stride;
    delayed::record_and_publish(a.states + i * stride, a.amaxes[i], scale, scale + a.inverse_offset);
  }
  return absl::OkStatus();
}

}  // namespace fp8::cpu
