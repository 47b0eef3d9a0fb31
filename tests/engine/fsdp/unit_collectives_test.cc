// How FSDP's collectives are laid out is read from FP8_FSDP_COLLECTIVES (fsdp_model.h):
// packed by default, per_parameter on request, anything else an error that says what.
#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/engine/fsdp/fsdp_model.h"

namespace fp8::engine::fsdp {
namespace {

class UnitCollectivesTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("FP8_FSDP_COLLECTIVES"); }
};

TEST_F(UnitCollectivesTest, PackedUnlessAskedForAParameterAtATime) {
  unsetenv("FP8_FSDP_COLLECTIVES");
  EXPECT_EQ(*unit_collectives_from_environment(), UnitCollectives::kPacked);
  setenv("FP8_FSDP_COLLECTIVES", "packed", 1);
  EXPECT_EQ(*unit_collectives_from_environment(), UnitCollectives::kPacked);
  setenv("FP8_FSDP_COLLECTIVES", "per_parameter", 1);
  EXPECT_EQ(*unit_collectives_from_environment(), UnitCollectives::kPerParameter);
}

TEST_F(UnitCollectivesTest, AnotherValueIsAnErrorNamingIt) {
  setenv("FP8_FSDP_COLLECTIVES", "per-parameter", 1);
  const auto got = unit_collectives_from_environment();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "FP8_FSDP_COLLECTIVES=per-parameter"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "packed or per_parameter")) << got.status();
}

}  // namespace
}  // namespace fp8::engine::fsdp
