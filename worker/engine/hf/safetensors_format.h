// The safetensors file format (Hugging Face's), which this project writes and reads itself:
//
//   8 bytes   N, the header's length, little-endian u64
//   N bytes   JSON: {"<tensor>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//             ..., "__metadata__": {"<key>": "<string>", ...}}, padded with spaces to a
//             multiple of 8 so that the data after it starts aligned
//   the rest  every tensor's bytes, little-endian, row-major; offsets are relative to here
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8::hf {

enum class SafetensorsDType : uint8_t { kF32, kBF16 };

// "F32", "BF16": the names in the header.
std::string_view dtype_name(SafetensorsDType dtype);
std::optional<SafetensorsDType> parse_dtype(std::string_view name);
uint64_t element_bytes(SafetensorsDType dtype);

inline constexpr std::string_view kMetadataKey = "__metadata__";
// Hugging Face's reader refuses larger headers; so does ours, before allocating one.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
inline constexpr uint64_t kHeaderAlignment = 8;

// One tensor as the header describes it.
struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section
  uint64_t end = 0;

  int64_t numel() const;
};

}  // namespace fp8::hf
