// Dotted overrides (the future `--set`): applied at load time before defaults, or to a
// resolved spec, and validated like the file.
#include <string>
#include <vector>

#include "common/jobspec/loader.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/common/jobspec_test_util.h"

namespace fp8::jobspec {
namespace {

using ::testing::HasSubstr;
using testing::kMinimalJob;

v1::JobSpec load_minimal(const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(kMinimalJob, "job.yaml", overrides);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *loaded : v1::JobSpec();
}

std::string override_error(const std::vector<std::string>& overrides) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(kMinimalJob, "job.yaml", overrides);
  return loaded.ok() ? "(loaded)" : std::string(loaded.status().message());
}

TEST(OverridesAtLoad, SetScalarsListsMapsAndSections) {
  v1::JobSpec s = load_minimal({
      "train.steps=200",
      "train.lr = 3e-4",  // spaces around '=' belong to the path and value; YAML trims the value
      "fp8.recipe=rowwise",
      "fp8.exclude=[output, 'layers.0.*']",
      "labels.team=numerics",
      "labels.app.kubernetes.io/name=fp8",  // label keys may contain dots
      "fp8.gemms={grad_weight: {fast_accum: true}}",
      "resources.memory_gb=12.5",
  });
  EXPECT_EQ(s.train().steps(), 200);
  EXPECT_DOUBLE_EQ(s.train().lr(), 3e-4);
  EXPECT_EQ(s.fp8().recipe(), v1::Fp8Spec::ROWWISE);
  ASSERT_EQ(s.fp8().exclude_size(), 2);
  EXPECT_EQ(s.fp8().exclude(1), "layers.0.*");
  EXPECT_EQ(s.labels().at("team"), "numerics");
  EXPECT_EQ(s.labels().at("app.kubernetes.io/name"), "fp8");
  EXPECT_TRUE(s.fp8().gemms().grad_weight().fast_accum());
  EXPECT_DOUBLE_EQ(s.resources().memory_gb(), 12.5);
}

TEST(OverridesAtLoad, DerivedDefaultsFollowOverriddenInputs) {
  v1::JobSpec s = load_minimal({"model.dim=128", "train.lr=0.01", "fp8.recipe=rowwise"});
  EXPECT_EQ(s.model().ffn_dim(), 352);  // 2/3 * 512 = 341 -> 352
  EXPECT_DOUBLE_EQ(s.train().min_lr(), 0.001);
  EXPECT_TRUE(s.fp8().power_of_2_scales());
}

TEST(OverridesAtLoad, EmptyingExcludeKeepsItEmpty) {
  EXPECT_TRUE(load_minimal({"fp8.exclude=[]"}).fp8().exclude().empty());
}

TEST(OverridesAtLoad, LaterOverridesWin) {
  EXPECT_EQ(load_minimal({"train.steps=5", "train.steps=7"}).train().steps(), 7);
}

TEST(OverridesAtLoad, BadOverridesAreReportedAfterTheFile) {
  EXPECT_EQ(override_error({"train.stepz=5"}),
            "override 'train.stepz=5': train.stepz: unknown field (did you mean 'steps'?)");
  EXPECT_EQ(override_error({"train.steps=abc"}),
            "override 'train.steps=abc': train.steps: expected an integer, got 'abc'");
  EXPECT_EQ(override_error({"steps"}), "override 'steps': expected field.path=value, e.g. train.steps=200");
  EXPECT_EQ(override_error({"=5"}), "override '=5': expected field.path=value, e.g. train.steps=200");
  EXPECT_EQ(override_error({"train..steps=5"}),
            "override 'train..steps=5': train..steps: is not a field path (an empty "
            "name between dots)");
  EXPECT_EQ(
      override_error({"train.steps.x=5"}),
      "override 'train.steps.x=5': train.steps: is a value, not a section; train.steps.x names nothing");
  EXPECT_EQ(
      override_error({"fp8.exclude[0]=x"}),
      "override 'fp8.exclude[0]=x': fp8.exclude[0]: list entries cannot be set one by one; set the whole "
      "list, e.g. fp8.exclude=[output]");
  EXPECT_THAT(override_error({"train.steps=[1"}),
              HasSubstr("override 'train.steps=[1': train.steps: the value is not "
                        "valid YAML"));
}

TEST(OverridesAtLoad, OverriddenValuesAreValidatedWhereTheyCameFrom) {
  EXPECT_EQ(override_error({"train.steps=0"}), "override 'train.steps=0': train.steps: must be > 0, got 0");
  // A problem the override causes in a field it did not touch points at that field.
  EXPECT_EQ(override_error({"model.n_heads=6"}),
            "override 'model.n_heads=6': model.n_heads: 6 does not divide model.dim (64)");
  EXPECT_EQ(override_error({"train.warmup_steps=500"}),
            "override 'train.warmup_steps=500': train.warmup_steps: 500 exceeds train.steps (100)");
}

TEST(ApplyOverride, ChangesAResolvedSpec) {
  v1::JobSpec s = load_minimal();
  ASSERT_TRUE(apply_override(s, "train.steps=200").ok());
  EXPECT_EQ(s.train().steps(), 200);
}

TEST(ApplyOverride, DefaultedDerivedFieldsFollowTheirInput) {
  v1::JobSpec s = load_minimal();
  ASSERT_TRUE(apply_override(s, "model.dim=128").ok());
  EXPECT_EQ(s.model().ffn_dim(), 352);
  ASSERT_TRUE(apply_override(s, "model.n_heads=8").ok());
  EXPECT_EQ(s.model().n_kv_heads(), 8);
  ASSERT_TRUE(apply_override(s, "train.lr=0.02").ok());
  EXPECT_DOUBLE_EQ(s.train().min_lr(), 0.002);
  ASSERT_TRUE(apply_override(s, "name=renamed").ok());
  EXPECT_EQ(s.checkpoint().dir(), "checkpoints/renamed");
  ASSERT_TRUE(apply_override(s, "fp8.recipe=rowwise").ok());
  EXPECT_TRUE(s.fp8().power_of_2_scales());
  EXPECT_TRUE(s.fp8().all_gather_fp8());
  ASSERT_TRUE(apply_override(s, "fp8.recipe=none").ok());
  EXPECT_FALSE(s.fp8().power_of_2_scales());
  EXPECT_FALSE(s.fp8().all_gather_fp8());
}

// parallel.tensor > 1 turns the fp8 all-gather's default off (there is no FSDP); back at 1
// it returns. The derived checkpoint.dir stays: tensor-parallel jobs checkpoint too.
TEST(ApplyOverride, DefaultsFollowParallelTensor) {
  v1::JobSpec s = load_minimal({"model.ffn_dim=192"});
  ASSERT_TRUE(apply_override(s, "resources.world_size=2").ok());
  ASSERT_TRUE(s.fp8().all_gather_fp8());
  ASSERT_EQ(s.checkpoint().dir(), "checkpoints/t");
  absl::Status status = apply_override(s, "parallel.tensor=2");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(s.parallel().tensor(), 2);
  EXPECT_FALSE(s.fp8().all_gather_fp8());
  EXPECT_EQ(s.checkpoint().dir(), "checkpoints/t");
  status = apply_override(s, "parallel.tensor=1");
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(s.fp8().all_gather_fp8());
  // At load, overrides apply before the defaults.
  s = load_minimal({"model.ffn_dim=192", "resources.world_size=2", "parallel.tensor=2"});
  EXPECT_FALSE(s.fp8().all_gather_fp8());
  EXPECT_EQ(s.checkpoint().dir(), "checkpoints/t");
}

TEST(ApplyOverride, DerivedFieldsTheUserChoseStay) {
  v1::JobSpec s = load_minimal({"model.ffn_dim=256", "model.n_kv_heads=2"});
  ASSERT_TRUE(apply_override(s, "model.dim=128").ok());
  EXPECT_EQ(s.model().ffn_dim(), 256);
  ASSERT_TRUE(apply_override(s, "model.n_heads=8").ok());
  EXPECT_EQ(s.model().n_kv_heads(), 2);
}

TEST(ApplyOverride, InvalidResultLeavesTheSpecUnchanged) {
  v1::JobSpec s = load_minimal();
  const v1::JobSpec before = s;
  absl::Status status = apply_override(s, "train.grad_accum=3");
  EXPECT_EQ(status.message(),
            "override 'train.grad_accum=3': train.grad_accum: 3 does not divide train.batch_size (4)");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(s, before));
  status = apply_override(s, "model.colour=blue");
  EXPECT_EQ(status.message(),
            "override 'model.colour=blue': model.colour: unknown field; model has architecture, "
            "vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_dim, max_seq_len, rope_theta, "
            "norm_eps, tie_embeddings, init_from");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(s, before));
}

TEST(ApplyOverride, HostileTextIsEscapedInMessages) {
  v1::JobSpec s = load_minimal();
  for (const char* assignment : {"labels.\x01\x1b[31m=x", "model.\x7f=1", "train.steps=\x01"}) {
    absl::Status status = apply_override(s, assignment);
    ASSERT_FALSE(status.ok()) << assignment;
    for (char c : status.message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << status.message();
  }
}

}  // namespace
}  // namespace fp8::jobspec
