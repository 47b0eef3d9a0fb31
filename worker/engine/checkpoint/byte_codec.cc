#include "worker/engine/checkpoint/byte_codec.h"

#include <cstring>

namespace fp8::checkpoint {
namespace {

template <typename T>
void AppendRaw(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // host is little-endian (static_assert in the header)
  out.append(bytes, sizeof(T));
}

}  // namespace

void AppendU8(std::string& out, uint8_t value) { AppendRaw(out, value); }
void AppendU32(std::string& out, uint32_t value) { AppendRaw(out, value); }
void AppendU64(std::string& out, uint64_t value) { AppendRaw(out, value); }
void AppendI64(std::string& out, int64_t value) { AppendRaw(out, value); }

void AppendString(std::string& out, std::string_view value) {
  AppendU32(out, static_cast<uint32_t>(value.size()));
  out.append(value);
}

bool ByteCursor::ReadBytes(size_t n, std::span<const std::byte>& bytes) {
  if (n > remaining()) return false;
  bytes = data_.subspan(position_, n);
  position_ += n;
  return true;
}

namespace {

template <typename T>
bool ReadRaw(ByteCursor& cursor, T& value) {
  std::span<const std::byte> bytes;
  if (!cursor.ReadBytes(sizeof(T), bytes)) return false;
  std::memcpy(&value, bytes.data(), sizeof(T));
  return true;
}

}  // namespace

bool ByteCursor::ReadU8(uint8_t& value) { return ReadRaw(*this, value); }
bool ByteCursor::ReadU32(uint32_t& value) { return ReadRaw(*this, value); }
bool ByteCursor::ReadU64(uint64_t& value) { return ReadRaw(*this, value); }
bool ByteCursor::ReadI64(int64_t& value) { return ReadRaw(*this, value); }

bool ByteCursor::ReadString(size_t max_bytes, std::string& value) {
  const size_t start = position_;
  uint32_t length = 0;
  std::span<const std::byte> bytes;
  if (!ReadU32(length) || length > max_bytes || !ReadBytes(length, bytes)) {
    position_ = start;
    return false;
  }
  value.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace fp8::checkpoint
