#include "worker/engine/checkpoint/record_info.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {

std::string ShapeToString(const Shape& shape) { return Cat("[", absl::StrJoin(shape, ", "), "]"); }

absl::StatusOr<uint64_t> PayloadBytes(DType dtype, const Shape& shape, std::string_view what) {
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        Cat(what, " has ", shape.size(), " dimensions; at most ", kMaxRank, " are supported"));
  }
  uint64_t bytes = ElementSize(dtype);
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(Cat(what, " has a negative dimension: ", ShapeToString(shape)));
    }
    const auto udim = static_cast<uint64_t>(dim);
    if (udim != 0 && bytes > std::numeric_limits<uint64_t>::max() / udim) {
      return absl::InvalidArgumentError(Cat(what, " shape ", ShapeToString(shape), " is too large"));
    }
    bytes *= udim;
  }
  return bytes;
}

absl::Status CheckRecordName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("a record name must not be empty");
  if (name.size() > kMaxRecordNameBytes) {
    return absl::InvalidArgumentError(Cat("record name '", name.substr(0, 64), "...' is ", name.size(),
                                          " bytes; at most ", kMaxRecordNameBytes, " are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace fp8::checkpoint
