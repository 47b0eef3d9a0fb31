#include "worker/engine/hf/safetensors_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "fp8/arith.h"
#include "nlohmann/json.hpp"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian bytes");

absl::Status bad(const std::filesystem::path& path, const std::string& why) {
  return absl::DataLossError(absl::StrCat(path.string(), ": not a valid safetensors file: ", why));
}

// Whether `v` is a non-negative integer, stored to `out`.
bool as_size(const nlohmann::json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<SafetensorsReader> SafetensorsReader::open(const std::filesystem::path& path, bool follow_links) {
  FP8_ASSIGN_OR_RETURN(checkpoint::InputFile file, checkpoint::InputFile::open(path, follow_links));
  SafetensorsReader r(std::move(file));
  const uint64_t size = r.file_.size();
  if (size < 8) return bad(path, absl::StrCat("the file has ", size, " bytes, fewer than the 8 of the header length"));
  std::byte prefix[8];
  FP8_RETURN_IF_ERROR(r.file_.read_at(0, prefix));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<uint64_t>(prefix[i]);
  if (header_bytes > kMaxHeaderBytes || header_bytes > size - 8) {
    return bad(path, absl::StrCat("header length ", header_bytes, " does not fit in the file's ", size, " bytes"));
  }
  std::string json(static_cast<size_t>(header_bytes), '\0');
  FP8_RETURN_IF_ERROR(r.file_.read_at(8, std::as_writable_bytes(std::span(json))));
  r.data_start_ = 8 + header_bytes;
  FP8_RETURN_IF_ERROR(r.parse_header(json));
  return r;
}

absl::Status SafetensorsReader::parse_header(std::string_view text) {
  const std::filesystem::path& p = path();
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad(p, "the header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return bad(p, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return bad(p, absl::StrCat("__metadata__ '", key, "' is not a string"));
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "': ");
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      return bad(p, where + "needs dtype, shape and data_offsets");
    }
    SafetensorsTensorInfo t;
    t.name = name;
    const std::optional<SafetensorsDType> dtype =
        entry["dtype"].is_string() ? parse_dtype(entry["dtype"].get<std::string>()) : std::nullopt;
    if (!dtype) return bad(p, absl::StrCat(where, "dtype ", entry["dtype"].dump(), " is not F32 or BF16"));
    t.dtype = *dtype;
    if (!entry["shape"].is_array()) return bad(p, where + "shape is not an array");
    uint64_t numel = 1;
    for (const nlohmann::json& d : entry["shape"]) {
      uint64_t dim = 0;
      // Each dim below 2^31 keeps the product of a few of them from overflowing unseen.
      if (!as_size(d, dim) || dim > std::numeric_limits<int32_t>::max()) return bad(p, where + "shape holds a bad dim");
      if (numel > std::numeric_limits<uint64_t>::max() / std::max<uint64_t>(dim, 1)) {
        return bad(p, where + "shape is too large");
      }
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const nlohmann::json& offsets = entry["data_offsets"];
    const bool pair = offsets.is_array() && offsets.size() == 2 && as_size(offsets[0], t.begin) &&
                      as_size(offsets[1], t.end);
    if (!pair || t.end < t.begin) return bad(p, where + "data_offsets is not [begin, end] with begin <= end");
    if (numel > std::numeric_limits<uint64_t>::max() / element_bytes(t.dtype) ||
        t.end - t.begin != numel * element_bytes(t.dtype)) {
      return bad(p, absl::StrCat(where, "data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin,
                                 " bytes; dtype and shape need ", numel * element_bytes(t.dtype)));
    }
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) { return a.begin < b.begin; });
  // The tensors tile the data section: no gap, no overlap, nothing after the last.
  uint64_t expected = 0;
  for (const SafetensorsTensorInfo& t : tensors_) {
    if (t.begin != expected) {
      return bad(p, absl::StrCat("tensor '", t.name, "' starts at data offset ", t.begin, ", not ", expected,
                                 " (tensors overlap or leave a gap)"));
    }
    expected = t.end;
  }
  const uint64_t data_bytes = file_.size() - data_start_;
  if (expected != data_bytes) {
    return bad(p, absl::StrCat("the header describes ", expected, " bytes of tensor data; the file holds ", data_bytes,
                               expected > data_bytes ? " (truncated?)" : ""));
  }
  return absl::OkStatus();
}

const SafetensorsTensorInfo* SafetensorsReader::find(std::string_view name) const {
  for (const SafetensorsTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::byte>> SafetensorsReader::read_bytes(std::string_view name) const {
  const SafetensorsTensorInfo* t = find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(path().string(), ": no tensor '", std::string(name), "'"));
  std::vector<std::byte> bytes(static_cast<size_t>(t->end - t->begin));
  FP8_RETURN_IF_ERROR(file_.read_at(data_start_ + t->begin, bytes));
  return bytes;
}

absl::StatusOr<std::vector<float>> SafetensorsReader::read_f32(std::string_view name) const {
  const SafetensorsTensorInfo* t = find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(path().string(), ": no tensor '", std::string(name), "'"));
  return read_f32_rows(name, 0, t->shape.empty() ? 1 : t->shape[0]);
}

absl::StatusOr<std::vector<float>> SafetensorsReader::read_f32_rows(std::string_view name, int64_t begin,
                                                                  int64_t end) const {
  const SafetensorsTensorInfo* found = find(name);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat(path().string(), ": no tensor '", std::string(name), "'"));
  const SafetensorsTensorInfo& t = *found;
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  if (begin < 0 || begin > end || end > rows) {
    return absl::InvalidArgumentError(absl::StrCat(path().string(), ": rows [", begin, ", ", end, ") of ",
                                                   std::string(name), ", which has ", rows));
  }
  const int64_t row_elements = rows == 0 ? 0 : t.numel() / rows;
  const uint64_t width = element_bytes(t.dtype);
  std::vector<std::byte> bytes(static_cast<size_t>((end - begin) * row_elements) * width);
  FP8_RETURN_IF_ERROR(file_.read_at(data_start_ + t.begin + static_cast<uint64_t>(begin * row_elements) * width, bytes));
  std::vector<float> out(static_cast<size_t>((end - begin) * row_elements));
  if (t.dtype == SafetensorsDType::kF32) {
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // null for an empty tensor
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = bf16_to_float(h);
    }
  }
  return out;
}

}  // namespace fp8::hf
