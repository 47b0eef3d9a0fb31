// Little-endian encoding of the fixed-width fields and length-prefixed strings that the
// shard header, index and footer are made of. Decoding is bounds-checked: a corrupt
// length can make a read fail, never read past the buffer.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fp8::checkpoint {

// The format is little-endian and payloads are stored as the tensors lie in memory, so a
// big-endian host would need byte swapping that nothing here does.
static_assert(std::endian::native == std::endian::little, "checkpoint format assumes a little-endian host");

void append_u8(std::string& out, uint8_t value);
void append_u32(std::string& out, uint32_t value);
void append_u64(std::string& out, uint64_t value);
void append_i64(std::string& out, int64_t value);
// u32 length, then the bytes.
void append_string(std::string& out, std::string_view value);

class ByteCursor {
 public:
  explicit ByteCursor(std::span<const std::byte> data) : data_(data) {}

  // Each returns false, consuming nothing, when the buffer holds too few bytes.
  bool read_u8(uint8_t& value);
  bool read_u32(uint32_t& value);
  bool read_u64(uint64_t& value);
  bool read_i64(int64_t& value);
  // Also false when the stored length exceeds `max_bytes`.
  bool read_string(size_t max_bytes, std::string& value);
  bool read_bytes(size_t n, std::span<const std::byte>& bytes);

  size_t position() const { return position_; }
  size_t remaining() const { return data_.size() - position_; }

 private:
  std::span<const std::byte> data_;
  size_t position_ = 0;
};

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace fp8::checkpoint
