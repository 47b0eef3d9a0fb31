#include "worker/engine/checkpoint/byte_codec.h"

#include <cstring>

namespace fp8::checkpoint {
namespace {

template <typename T>
void append_raw(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // host is little-endian (static_assert in the header)
  out.append(bytes, sizeof(T));
}

}  // namespace

void append_u8(std::string& out, uint8_t value) { append_raw(out, value); }
void append_u32(std::string& out, uint32_t value) { append_raw(out, value); }
void append_u64(std::string& out, uint64_t value) { append_raw(out, value); }
void append_i64(std::string& out, int64_t value) { append_raw(out, value); }

void append_string(std::string& out, std::string_view value) {
  append_u32(out, static_cast<uint32_t>(value.size()));
  out.append(value);
}

bool ByteCursor::read_bytes(size_t n, std::span<const std::byte>& bytes) {
  if (n > remaining()) return false;
  bytes = data_.subspan(position_, n);
  position_ += n;
  return true;
}

namespace {

template <typename T>
bool read_raw(ByteCursor& cursor, T& value) {
  std::span<const std::byte> bytes;
  if (!cursor.read_bytes(sizeof(T), bytes)) return false;
  std::memcpy(&value, bytes.data(), sizeof(T));
  return true;
}

}  // namespace

bool ByteCursor::read_u8(uint8_t& value) { return read_raw(*this, value); }
bool ByteCursor::read_u32(uint32_t& value) { return read_raw(*this, value); }
bool ByteCursor::read_u64(uint64_t& value) { return read_raw(*this, value); }
bool ByteCursor::read_i64(int64_t& value) { return read_raw(*this, value); }

bool ByteCursor::read_string(size_t max_bytes, std::string& value) {
  const size_t start = position_;
  uint32_t length = 0;
  std::span<const std::byte> bytes;
  if (!read_u32(length) || length > max_bytes || !read_bytes(length, bytes)) {
    position_ = start;
    return false;
  }
  value.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace fp8::checkpoint
