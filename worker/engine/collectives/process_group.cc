#include "worker/engine/collectives/process_group.h"

#include "absl/strings/str_cat.h"

namespace fp8::engine::collectives {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
  }
  return "unknown";  // an out-of-range value cast into the enum
}

absl::Status ProcessGroup::all_gather_parts(std::span<const AllGatherPart> parts) {
  for (const AllGatherPart& p : parts) {
    if (absl::Status s = all_gather(p.send, p.recv, p.bytes_per_rank); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::reduce_scatter_parts(std::span<const ReduceScatterPart> parts, ReduceOp op) {
  for (const ReduceScatterPart& p : parts) {
    if (absl::Status s = reduce_scatter(p.send, p.recv, p.count_per_rank, op); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::reduce_scatter_bf16_parts(std::span<const Bf16ReduceScatterPart> /*parts*/) {
  return absl::UnimplementedError(absl::StrCat("reduce_scatter of bf16: not offered by the ", backend_name(),
                                               " process group"));
}

}  // namespace fp8::engine::collectives
