// The small pieces under the loader: suggestions, scalar spellings, error ordering.
#include <cmath>
#include <string>

#include "common/jobspec/issues.h"
#include "common/jobspec/scalars.h"
#include "common/jobspec/source_map.h"
#include "common/jobspec/suggest.h"
#include "fp8/v1/job.pb.h"
#include "gtest/gtest.h"

namespace fp8::jobspec {
namespace {

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("n_head", "n_heads"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("DIM", "dim"), 0u);  // case does not count
}

TEST(Suggest, OnlyCloseNamesAreSuggested) {
  const std::vector<std::string> names = {"dim", "n_layers", "n_heads", "n_kv_heads", "lr"};
  EXPECT_EQ(did_you_mean("n_head", names), " (did you mean 'n_heads'?)");
  EXPECT_EQ(did_you_mean("layers", names), " (did you mean 'n_layers'?)");
  EXPECT_EQ(did_you_mean("colour", names), "");
  EXPECT_EQ(did_you_mean("xy", names), "");  // two edits away from "lr" is too far for two letters
  EXPECT_EQ(closest_name(std::string(1000, 'a'), names), "");
}

TEST(Scalars, Integers) {
  EXPECT_EQ(*parse_integer("42", 0, 100), 42);
  EXPECT_EQ(*parse_integer("-7", -10, 10), -7);
  EXPECT_FALSE(parse_integer("+7", -10, 10).ok());
  EXPECT_FALSE(parse_integer(" 7", -10, 10).ok());
  EXPECT_FALSE(parse_integer("0x10", 0, 100).ok());
  EXPECT_FALSE(parse_integer("1_000", 0, 10000).ok());
  EXPECT_FALSE(parse_integer("", 0, 10).ok());
  EXPECT_EQ(parse_integer("11", 0, 10).status().message(), "11 is out of range [0, 10]");
  EXPECT_EQ(*parse_unsigned("18446744073709551615"), 18446744073709551615u);
  EXPECT_FALSE(parse_unsigned("18446744073709551616").ok());
}

TEST(Scalars, NumbersBoolsAndEnums) {
  EXPECT_DOUBLE_EQ(*parse_number("3e-4"), 3e-4);
  EXPECT_DOUBLE_EQ(*parse_number("10"), 10);
  EXPECT_DOUBLE_EQ(*parse_number("-0.5"), -0.5);
  EXPECT_FALSE(parse_number("inf").ok());
  EXPECT_FALSE(parse_number("1e400").ok());
  EXPECT_FALSE(parse_number("1,5").ok());
  EXPECT_TRUE(*parse_bool("True"));
  EXPECT_FALSE(*parse_bool("false"));
  EXPECT_FALSE(parse_bool("yes").ok());
  const auto& recipes = *v1::Fp8Spec::Recipe_descriptor();
  EXPECT_EQ((*parse_enum_name("ROWWISE", recipes))->number(), v1::Fp8Spec::ROWWISE);
  EXPECT_FALSE(parse_enum_name("recipe_unspecified", recipes).ok());
  EXPECT_EQ(enum_choices(recipes), "tensorwise, rowwise, rowwise_with_gw_hp, delayed, none, blockwise");
}

TEST(Scalars, NumbersAreWrittenShortAndExact) {
  for (double v : {0.1, 3e-4, 1e-8, 10000.0, 0.1 + 0.2, 6.02e23, -1.5, 0.0, 1e300, 5e-324, -2.5e-7}) {
    std::string text = format_number(v);
    EXPECT_EQ(*parse_number(text), v) << text;
  }
  EXPECT_EQ(format_number(3e-4), "0.0003");
  EXPECT_EQ(format_number(6e-5), "6e-5");
  EXPECT_EQ(format_number(1e-8), "1e-8");
  EXPECT_EQ(format_number(10000), "10000");
  EXPECT_EQ(format_number(500000), "500000");
  EXPECT_EQ(format_number(6.02e23), "6.02e23");
  EXPECT_EQ(format_number(0.1 + 0.2), "0.30000000000000004");
}

TEST(Issues, OneLinePerIssueInSourceOrderWithUnlocatedLast) {
  SourceMap where;
  where.record("model", {"job.yaml", 2, 1, 0});
  where.record("model.dim", {"job.yaml", 3, 3, 0});
  where.record("train.steps", {"override 'train.steps=0'", 0, 0, 1});
  Issues issues = {
      {"train.steps", "must be > 0, got 0"},
      {"model.ffn_dim", "derived, so shown at its section"},
      {"data", "required section is missing"},
      {"model.dim", "exact"},
      {"fp8", "anchored", std::nullopt, {"fp8.recipe", "model.dim"}},
  };
  absl::Status status = issues_to_status(issues, where, "job.yaml");
  EXPECT_EQ(status.message(),
            "job.yaml:2:1: model.ffn_dim: derived, so shown at its section\n"
            "job.yaml:3:3: model.dim: exact\n"
            "job.yaml:3:3: fp8: anchored\n"
            "override 'train.steps=0': train.steps: must be > 0, got 0\n"
            "job.yaml: data: required section is missing");
  EXPECT_TRUE(issues_to_status({}, where, "job.yaml").ok());
}

TEST(Issues, QuoteEscapesAndShortens) {
  EXPECT_EQ(quote("abc"), "'abc'");
  EXPECT_EQ(quote("a\nb\x01"), "'a\\nb\\x01'");
  EXPECT_EQ(quote(std::string(100, 'x')), "'" + std::string(60, 'x') + "...'");
}

TEST(SourceMap, Parents) {
  EXPECT_EQ(parent_path("fp8.exclude[2]"), "fp8.exclude");
  EXPECT_EQ(parent_path("fp8.exclude"), "fp8");
  EXPECT_EQ(parent_path("fp8"), "");
  EXPECT_EQ(join_path("", "model"), "model");
  EXPECT_EQ(join_path("model", "dim"), "model.dim");
}

}  // namespace
}  // namespace fp8::jobspec
