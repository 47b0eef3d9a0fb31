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

using testing::ExampleJob;
using ::testing::HasSubstr;
using testing::Testdata;

void ExpectRoundTrip(const v1::JobSpec& spec) {
  std::string text = ToYaml(spec);
  absl::StatusOr<v1::JobSpec> again = LoadJobSpecString(text, "describe.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
  std::string differences;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differ.Compare(spec, *again)) << differences << "\n" << text;
  EXPECT_EQ(ToYaml(*again), text);  // and the text is stable
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, SpecToYamlToSpecIsEqual) {
  absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecFile(GetParam());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectRoundTrip(*loaded);
}

INSTANTIATE_TEST_SUITE_P(GoodFiles, RoundTrip,
                         ::testing::Values(Testdata("good/minimal.yaml"), Testdata("good/full.yaml"),
                                           Testdata("good/pad_inner_dim.yaml"),
                                           Testdata("good/excluded_small_layers.yaml"),
                                           ExampleJob("tiny-cpu.yaml")));

TEST(ToYaml, EmptyListsAreWrittenSoTheirDefaultDoesNotComeBack) {
  absl::StatusOr<v1::JobSpec> loaded =
      LoadJobSpecString(std::string(testing::kMinimalJob) + "fp8:\n  exclude: []\n", "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(ToYaml(*loaded), HasSubstr("exclude: []"));
  ExpectRoundTrip(*loaded);
}

TEST(ToYaml, AwkwardStringsAndNumbersSurvive) {
  absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecString(testing::kMinimalJob, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  v1::JobSpec spec = *loaded;
  spec.set_owner("true");                        // a string that YAML would read as a bool
  spec.set_description("x: y # not a comment");  // needs quoting
  (*spec.mutable_labels())["n"] = "007";
  spec.mutable_data()->set_path("* weird: path/ü.txt");
  spec.mutable_train()->set_lr(0.1 + 0.2);  // 0.30000000000000004 exactly
  spec.mutable_train()->set_seed(18446744073709551615u);
  spec.mutable_fp8()->add_include("*");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  ExpectRoundTrip(spec);
}

TEST(ToYaml, WritesFieldsInSchemaOrderWithEnumNames) {
  absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecString(testing::kMinimalJob, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::string text = ToYaml(*loaded);
  EXPECT_THAT(text, HasSubstr("recipe: tensorwise"));
  EXPECT_THAT(text, HasSubstr("schedule: cosine"));
  EXPECT_THAT(text, HasSubstr("min_lr: 0.0001"));
  EXPECT_LT(text.find("name:"), text.find("model:"));
  EXPECT_LT(text.find("model:"), text.find("restarts:"));
}

}  // namespace
}  // namespace fp8::jobspec
