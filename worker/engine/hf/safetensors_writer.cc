#include "worker/engine/hf/safetensors_writer.h"

#include <bit>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian bytes");

absl::StatusOr<std::string> safetensors_header(std::span<const SafetensorsTensor> tensors,
                                               const std::map<std::string, std::string>& metadata) {
  // Ordered: tensors appear in the header in the order their bytes follow it.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string, std::less<>> names;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor name '", t.name, "' is empty, reserved or repeated"));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", t.name, "' has a negative dim"));
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t bytes = numel * element_bytes(t.dtype);
    if (bytes != t.bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", t.name, "' (", std::string(dtype_name(t.dtype)),
                                                     ") needs ", bytes, " bytes; got ", t.bytes.size()));
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  // Spaces are JSON whitespace: padding keeps the data section 8-byte aligned.
  json.append((kHeaderAlignment - json.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

absl::Status write_safetensors(const std::filesystem::path& path, std::span<const SafetensorsTensor> tensors,
                               const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> header = safetensors_header(tensors, metadata);
  if (!header.ok()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", header.status().message()));
  FP8_ASSIGN_OR_RETURN(checkpoint::OutputFile file, checkpoint::OutputFile::create(path));
  FP8_RETURN_IF_ERROR(file.write(std::as_bytes(std::span(*header))));
  for (const SafetensorsTensor& t : tensors) FP8_RETURN_IF_ERROR(file.write(t.bytes));
  FP8_RETURN_IF_ERROR(file.sync());
  return file.close();
}

}  // namespace fp8::hf
