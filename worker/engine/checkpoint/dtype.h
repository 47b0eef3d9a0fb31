// Element types a checkpoint record can hold, and their on-disk tags.
//
// The tags are part of the file format: never renumber one. A new type takes a new tag
// (an older reader then reports the record's type as unknown instead of misreading it).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8::checkpoint {

enum class DType : uint8_t {
  kF32 = 1,
  kF64 = 2,
  kI32 = 3,
  kI64 = 4,
  kU8 = 5,     // a tensor of bytes (e.g. fp8 values kept as raw e4m3 bits)
  kBytes = 6,  // an opaque blob (e.g. serialized RNG or data-loader state); shape is [size]
};

// Bytes per element (1 for kBytes).
size_t element_size(DType dtype);

// "f32", "f64", "i32", "i64", "u8", "bytes": the names used in messages.
std::string_view d_type_name(DType dtype);

// The DType for an on-disk tag, or nullopt for a tag this build does not know.
std::optional<DType> d_type_from_tag(uint8_t tag);

// C++ element types with a DType, for the typed read/write helpers.
template <typename T>
concept TensorElement = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, int32_t> ||
    std::same_as<T, int64_t> || std::same_as<T, uint8_t>;

template <TensorElement T>
constexpr DType d_type_of() {
  if constexpr (std::same_as<T, float>) return DType::kF32;
  if constexpr (std::same_as<T, double>) return DType::kF64;
  if constexpr (std::same_as<T, int32_t>) return DType::kI32;
  if constexpr (std::same_as<T, int64_t>) return DType::kI64;
  if constexpr (std::same_as<T, uint8_t>) return DType::kU8;
}

}  // namespace fp8::checkpoint
