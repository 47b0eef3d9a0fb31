// Random mutations of good job files: the loader never crashes, never hangs, and either
// loads or explains itself in well-formed lines.
#include <random>
#include <string>
#include <vector>

#include "common/jobspec/loader.h"
#include "common/jobspec/to_yaml.h"
#include "gtest/gtest.h"
#include "tests/common/jobspec_test_util.h"

namespace fp8::jobspec {
namespace {

using testing::example_job;
using testing::split_lines;
using testing::read_text;
using testing::testdata;

// Characters that matter to YAML, plus a few that should never appear.
constexpr char kInteresting[] = ":-[]{},&*!|>'\"#%@` \t\n0123456789abcxyz.\\\x01\x7f\xc3\xa9";

std::string mutate(std::string text, std::mt19937& rng) {
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n == 0 ? 0 : n - 1)(rng); };
  int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits; ++e) {
    switch (pick(7)) {
      case 0:  // delete a byte
        if (!text.empty()) text.erase(pick(text.size()), 1);
        break;
      case 1:  // insert an interesting byte
        text.insert(pick(text.size() + 1), 1, kInteresting[pick(sizeof(kInteresting) - 1)]);
        break;
      case 2:  // replace a byte
        if (!text.empty()) text[pick(text.size())] = kInteresting[pick(sizeof(kInteresting) - 1)];
        break;
      case 3: {  // duplicate a line
        std::vector<std::string> lines = split_lines(text);
        size_t i = pick(lines.size());
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
        text.clear();
        for (const std::string& l : lines) text += l + "\n";
        break;
      }
      case 4: {  // swap two lines
        std::vector<std::string> lines = split_lines(text);
        std::swap(lines[pick(lines.size())], lines[pick(lines.size())]);
        text.clear();
        for (const std::string& l : lines) text += l + "\n";
        break;
      }
      case 5:  // truncate
        text.resize(pick(text.size() + 1));
        break;
      case 6:  // replace a number by an extreme one
        if (size_t at = text.find_first_of("0123456789", pick(text.size() + 1)); at != std::string::npos) {
          const char* extremes[] = {"0",  "-1", "99999999999999999999", "1e308", "-0", "2147483648",
                                    "16", "3"};
          text.replace(at, 1, extremes[pick(std::size(extremes))]);
        }
        break;
    }
  }
  return text;
}

TEST(Fuzz, MutatedFilesLoadOrFailCleanly) {
  const std::vector<std::string> seeds = {read_text(example_job("tiny-cpu.yaml")),
                                          read_text(testdata("good/full.yaml")),
                                          read_text(testdata("good/minimal.yaml"))};
  std::mt19937 rng(20261122);
  int loaded = 0, failed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = mutate(seeds[static_cast<size_t>(i) % seeds.size()], rng);
    absl::StatusOr<v1::JobSpec> spec = load_job_spec_string(text, "fuzz.yaml");
    if (spec.ok()) {
      ++loaded;
      // Whatever loads must also round-trip through ToYaml.
      absl::StatusOr<v1::JobSpec> again = load_job_spec_string(to_yaml(*spec), "again.yaml");
      EXPECT_TRUE(again.ok()) << again.status() << "\n--- input:\n" << text;
      continue;
    }
    ++failed;
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
    for (const std::string& line : split_lines(spec.status().message())) {
      ASSERT_TRUE(line.rfind("fuzz.yaml", 0) == 0) << "line without its source: " << line << "\n--- input:\n"
                                                   << text;
      for (char c : line) ASSERT_TRUE(c >= 0x20 && c < 0x7f) << "unprintable byte in: " << line;
    }
  }
  // Both outcomes must occur, or the mutations are too weak (or too strong) to test much.
  EXPECT_GT(loaded, 100);
  EXPECT_GT(failed, 1000);
}

TEST(Fuzz, MutatedOverridesFailCleanly) {
  const std::vector<std::string> seeds = {"train.steps=200", "fp8.exclude=[output, 'layers.*']",
                                          "labels.team=ml", "fp8.gemms={output: {input: {dtype: e5m2}}}"};
  std::mt19937 rng(7);
  absl::StatusOr<v1::JobSpec> base = load_job_spec_string(testing::kMinimalJob, "job.yaml");
  ASSERT_TRUE(base.ok());
  for (int i = 0; i < 2000; ++i) {
    std::string assignment = mutate(seeds[static_cast<size_t>(i) % seeds.size()], rng);
    v1::JobSpec spec = *base;
    absl::Status status = apply_override(spec, assignment);
    if (!status.ok()) {
      ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    }
    // Applied or refused, the spec is valid: a refused override changes nothing.
    EXPECT_TRUE(validate_job_spec(spec).ok()) << assignment;
  }
}

TEST(Fuzz, DeepNestingIsRefusedNotFollowed) {
  std::string deep = "name: " + std::string(5000, '[') + std::string(5000, ']') + "\n";
  absl::StatusOr<v1::JobSpec> spec = load_job_spec_string(deep, "deep.yaml");
  EXPECT_FALSE(spec.ok());
  std::string aliases =
      "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
      "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nname: [*c, *c, *c, *c, *c]\n";
  spec = load_job_spec_string(aliases, "aliases.yaml");
  EXPECT_FALSE(spec.ok());
}

}  // namespace
}  // namespace fp8::jobspec
