#include "worker/engine/train/mesh.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine {

absl::StatusOr<MeshGroups> make_mesh_groups(int world_rank, int world_size, int tensor, const MakeProcessGroup& make) {
  if (tensor < 1 || world_size % tensor != 0 || world_rank < 0 || world_rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("mesh: rank ", world_rank, " of ", world_size, " with ", tensor, " tensor-parallel ranks"));
  }
  if (!make) {
    return absl::FailedPreconditionError(
        "mesh: data parallelism beside tensor parallelism needs a way to form process groups (the caller's)");
  }
  const int data = world_size / tensor;
  const int d = world_rank / tensor, t = world_rank % tensor;
  MeshGroups groups;
  FP8_ASSIGN_OR_RETURN(groups.tensor, make(t, tensor, absl::StrCat("mesh/tensor-", d, "/")));
  FP8_ASSIGN_OR_RETURN(groups.data, make(d, data, absl::StrCat("mesh/data-", t, "/")));
  return groups;
}

}  // namespace fp8::engine
