#include "worker/engine/hf/safetensors_format.h"

namespace fp8::hf {

std::string_view dtype_name(SafetensorsDType dtype) {
  return dtype == SafetensorsDType::kBF16 ? "BF16" : "F32";
}

std::optional<SafetensorsDType> parse_dtype(std::string_view name) {
  if (name == "F32") return SafetensorsDType::kF32;
  if (name == "BF16") return SafetensorsDType::kBF16;
  return std::nullopt;
}

uint64_t element_bytes(SafetensorsDType dtype) { return dtype == SafetensorsDType::kBF16 ? 2 : 4; }

int64_t SafetensorsTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace fp8::hf
