// Writes a safetensors file (safetensors_format.h) from tensors in memory.
//
//   std::vector<SafetensorsTensor> tensors = {{"w", SafetensorsDType::kF32, {2, 3}, std::as_bytes(span)}};
//   absl::Status s = write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/hf/safetensors_format.h"

namespace fp8::hf {

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // little-endian elements, row-major; not owned
};

// The header (length prefix included, padded) for `tensors` laid out in the given order.
// InvalidArgument for a duplicate or reserved name, a negative dim, or bytes that do not
// match dtype and shape.
absl::StatusOr<std::string> safetensors_header(std::span<const SafetensorsTensor> tensors,
                                               const std::map<std::string, std::string>& metadata);

// Writes the file at `path` (replacing it) and fsyncs it. Errors name the path.
absl::Status write_safetensors(const std::filesystem::path& path, std::span<const SafetensorsTensor> tensors,
                               const std::map<std::string, std::string>& metadata);

}  // namespace fp8::hf
