// How FSDP's collectives are laid out is named by its owner (fp8-train reads
// FP8_FSDP_COLLECTIVES, fsdp_model.h): packed or per_parameter, anything else an error that
// says what and where.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/engine/fsdp/fsdp_model.h"

namespace fp8::engine::fsdp {
namespace {

TEST(ParseUnitCollectivesTest, PackedOrAParameterAtATime) {
  EXPECT_EQ(*parse_unit_collectives("packed", "x"), UnitCollectives::kPacked);
  EXPECT_EQ(*parse_unit_collectives("per_parameter", "x"), UnitCollectives::kPerParameter);
  EXPECT_EQ(FsdpOptions{}.collectives, UnitCollectives::kPacked);  // the default
}

TEST(ParseUnitCollectivesTest, AnotherValueIsAnErrorNamingItAndWhere) {
  const auto got = parse_unit_collectives("per-parameter", "FP8_FSDP_COLLECTIVES in the environment");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "FP8_FSDP_COLLECTIVES in the environment: 'per-parameter'"))
      << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "packed or per_parameter")) << got.status();
}

}  // namespace
}  // namespace fp8::engine::fsdp
