#include "worker/engine/checkpoint/dtype.h"

namespace fp8::checkpoint {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kU8:
    case DType::kBytes:
      return 1;
  }
  return 1;  // unreachable for a valid enum; DTypeFromTag guards what comes off disk
}

std::string_view d_type_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kBytes:
      return "bytes";
  }
  return "unknown";
}

std::optional<DType> d_type_from_tag(uint8_t tag) {
  switch (tag) {
    case static_cast<uint8_t>(DType::kF32):
    case static_cast<uint8_t>(DType::kF64):
    case static_cast<uint8_t>(DType::kI32):
    case static_cast<uint8_t>(DType::kI64):
    case static_cast<uint8_t>(DType::kU8):
    case static_cast<uint8_t>(DType::kBytes):
      return static_cast<DType>(tag);
    default:
      return std::nullopt;
  }
}

}  // namespace fp8::checkpoint
