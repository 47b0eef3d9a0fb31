#include "worker/engine/checkpoint/record_info.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {

std::string shape_to_string(const Shape& shape) { return cat("[", absl::StrJoin(shape, ", "), "]"); }

absl::StatusOr<uint64_t> payload_bytes(DType dtype, const Shape& shape, std::string_view what) {
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        cat(what, " has ", shape.size(), " dimensions; at most ", kMaxRank, " are supported"));
  }
  uint64_t bytes = element_size(dtype);
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(cat(what, " has a negative dimension: ", shape_to_string(shape)));
    }
    const auto udim = static_cast<uint64_t>(dim);
    if (udim != 0 && bytes > std::numeric_limits<uint64_t>::max() / udim) {
      return absl::InvalidArgumentError(cat(what, " shape ", shape_to_string(shape), " is too large"));
    }
    bytes *= udim;
  }
  return bytes;
}

absl::Status check_record_name(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("a record name must not be empty");
  if (name.size() > kMaxRecordNameBytes) {
    return absl::InvalidArgumentError(cat("record name '", name.substr(0, 64), "...' is ", name.size(),
                                          " bytes; at most ", kMaxRecordNameBytes, " are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace fp8::checkpoint
