// spec -> YAML text -> spec gives back an equal spec, so `fp8ctl describe` output is a
// job file that runs the same job.
#include "common/jobspec/to_yaml.h"

#include <string>

#include "common/jobspec/loader.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/common/jobspec_test_util.h"

namespace fp8::jobspec {
namespace {

using testing::example_job;
using ::testing::HasSubstr;
using testing::testdata;

void expect_round_trip(const v1::JobSpec& spec) {
  std::string text = to_yaml(spec);
  absl::StatusOr<v1::JobSpec> again = load_job_spec_string(text, "describe.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  std::string differences;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differ.Compare(spec, *again)) << differences << "\n" << text;
  EXPECT_EQ(to_yaml(*again), text);  // and the text is stable
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, SpecToYamlToSpecIsEqual) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  expect_round_trip(*loaded);
}

INSTANTIATE_TEST_SUITE_P(GoodFiles, RoundTrip,
                         ::testing::Values(testdata("good/minimal.yaml"), testdata("good/full.yaml"),
                                           testdata("good/pad_inner_dim.yaml"),
                                           testdata("good/excluded_small_layers.yaml"),
                                           example_job("tiny-cpu.yaml")));

TEST(ToYaml, EmptyListsAreWrittenSoTheirDefaultDoesNotComeBack) {
  absl::StatusOr<v1::JobSpec> loaded =
      load_job_spec_string(std::string(testing::kMinimalJob) + "fp8:\n  exclude: []\n", "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(to_yaml(*loaded), HasSubstr("exclude: []"));
  expect_round_trip(*loaded);
}

TEST(ToYaml, AwkwardStringsAndNumbersSurvive) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(testing::kMinimalJob, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  v1::JobSpec spec = *loaded;
  spec.set_owner("true");                        // a string that YAML would read as a bool
  spec.set_description("x: y # not a comment");  // needs quoting
  (*spec.mutable_labels())["n"] = "007";
  spec.mutable_data()->set_path("* weird: path/ü.txt");
  spec.mutable_train()->set_lr(0.1 + 0.2);  // 0.30000000000000004 exactly
  spec.mutable_train()->set_seed(18446744073709551615u);
  spec.mutable_fp8()->add_include("*");
  ASSERT_TRUE(validate_job_spec(spec).ok()) << validate_job_spec(spec);
  expect_round_trip(spec);
}

TEST(ToYaml, WritesFieldsInSchemaOrderWithEnumNames) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(testing::kMinimalJob, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::string text = to_yaml(*loaded);
  EXPECT_THAT(text, HasSubstr("recipe: tensorwise"));
  EXPECT_THAT(text, HasSubstr("schedule: cosine"));
  EXPECT_THAT(text, HasSubstr("min_lr: 0.0001"));
  EXPECT_LT(text.find("name:"), text.find("model:"));
  EXPECT_LT(text.find("model:"), text.find("restarts:"));
}

}  // namespace
}  // namespace fp8::jobspec
