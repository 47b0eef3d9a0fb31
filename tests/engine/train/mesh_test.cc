// How a rank of a D x T job finds its two groups (mesh.h): which ranks they hold, in which
// order it joins them, and their keys in the rendezvous.
#include "worker/engine/train/mesh.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace fp8::engine {
namespace {

struct Join {
  int rank, size;
  std::string prefix;
  bool operator==(const Join&) const = default;
};

// Records the joins; the groups it hands back are never used (null).
std::vector<Join> joins_of(int world_rank, int world_size, int tensor) {
  std::vector<Join> joins;
  const MakeProcessGroup make = [&](int rank, int size, const std::string& prefix)
      -> absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> {
    joins.push_back({rank, size, prefix});
    return std::unique_ptr<collectives::ProcessGroup>();
  };
  EXPECT_TRUE(make_mesh_groups(world_rank, world_size, tensor, make).ok());
  return joins;
}

TEST(MeshTest, TensorParallelRanksAreAdjacentAndEachJoinsItsTensorGroupFirst) {
  // World rank 5 of 8 with T = 2: tensor group 2 (ranks 4, 5) as its rank 1; data group of
  // tensor-parallel rank 1 (ranks 1, 3, 5, 7) as its rank 2.
  EXPECT_EQ(joins_of(5, 8, 2), (std::vector<Join>{{1, 2, "mesh/tensor-2/"}, {2, 4, "mesh/data-1/"}}));
  // T = 4 of 8: rank 6 is tensor rank 2 of group 1, data rank 1 of 2.
  EXPECT_EQ(joins_of(6, 8, 4), (std::vector<Join>{{2, 4, "mesh/tensor-1/"}, {1, 2, "mesh/data-2/"}}));
}

TEST(MeshTest, RefusesWhatIsNoMesh) {
  const MakeProcessGroup make = [](int, int, const std::string&)
      -> absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> { return nullptr; };
  EXPECT_FALSE(make_mesh_groups(0, 6, 4, make).ok());   // 4 does not divide 6
  EXPECT_FALSE(make_mesh_groups(8, 8, 2, make).ok());   // no rank 8 of 8
  EXPECT_EQ(make_mesh_groups(0, 4, 2, MakeProcessGroup()).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fp8::engine
