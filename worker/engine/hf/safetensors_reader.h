// Reads a safetensors file (safetensors_format.h): the header is parsed and checked when
// the file is opened, tensors are read on demand.
//
//   SafetensorsReader r = *SafetensorsReader::open("out/model.safetensors");
//   std::vector<float> w = *r.read_f32("model.norm.weight");   // bf16 widened exactly
//
// Open refuses, naming the file, a header that is not JSON, a tensor whose offsets do not
// match its dtype and shape, byte ranges that overlap, leave gaps or run past the file,
// and a file longer or shorter than its header says.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/hf/safetensors_format.h"

namespace fp8::hf {

class SafetensorsReader {
 public:
  // follow_links false: a symbolic link as the file is refused (checkpoint::InputFile).
  static absl::StatusOr<SafetensorsReader> open(const std::filesystem::path& path, bool follow_links = true);

  const std::filesystem::path& path() const { return file_.path(); }
  // In the order of their bytes in the file.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when there is no such tensor.
  const SafetensorsTensorInfo* find(std::string_view name) const;
  // Bytes of the data section's start: 8 + the header's length.
  uint64_t data_start() const { return data_start_; }

  // The tensor's raw bytes.
  absl::StatusOr<std::vector<std::byte>> read_bytes(std::string_view name) const;
  // The tensor as fp32 (F32 as stored, BF16 widened).
  absl::StatusOr<std::vector<float>> read_f32(std::string_view name) const;
  // Rows [begin, end) of dimension 0 as fp32 (the bytes of those rows only).
  absl::StatusOr<std::vector<float>> read_f32_rows(std::string_view name, int64_t begin, int64_t end) const;

 private:
  explicit SafetensorsReader(checkpoint::InputFile file) : file_(std::move(file)) {}
  absl::Status parse_header(std::string_view json);

  checkpoint::InputFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace fp8::hf
