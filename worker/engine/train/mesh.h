// The process groups of one rank of a job laid out as a mesh: D data-parallel groups × T
// tensor-parallel ranks (parallel.tensor; resources.world_size = D × T). Tensor-parallel
// ranks are adjacent, world ranks d·T .. d·T + T − 1, so that on a GPU node they share its
// links; the data-parallel group of tensor-parallel rank t is the world ranks t, T + t, ...
// The model is split across the first (model/tensor_parallel.h), FSDP shards across the
// second.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine {

// Joins a process group of `size` ranks as `rank`, over the job's rendezvous, its keys under
// `prefix` (each group of a job has its own).
using MakeProcessGroup = std::function<absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>>(
    int rank, int size, const std::string& prefix)>;

struct MeshGroups {
  std::unique_ptr<collectives::ProcessGroup> tensor;
  std::unique_ptr<collectives::ProcessGroup> data;
};

// This rank's two groups. Every rank joins its tensor-parallel group first, then its
// data-parallel one, so that no two groups wait on each other.
absl::StatusOr<MeshGroups> make_mesh_groups(int world_rank, int world_size, int tensor, const MakeProcessGroup& make);

}  // namespace fp8::engine
