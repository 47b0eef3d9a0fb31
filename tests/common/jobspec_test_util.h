// Shared by the job spec tests: where the test files are, and reading them.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace fp8::jobspec::testing {

inline std::string testdata(const std::string& relative) {
  return std::string(FP8_JOBSPEC_TESTDATA) + "/" + relative;
}

inline std::string example_job(const std::string& name) {
  return std::string(FP8_EXAMPLES_DIR) + "/jobs/" + name;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// absl::string_view: what Status::message() returns with this Abseil build.
inline std::vector<std::string> split_lines(absl::string_view text) { return absl::StrSplit(text, '\n'); }

// The minimal valid job, for tests that change one thing.
inline constexpr char kMinimalJob[] = R"(name: t
model:
  dim: 64
  n_layers: 2
  n_heads: 4
  max_seq_len: 64
data:
  path: corpus.txt
train:
  steps: 100
  batch_size: 4
  lr: 1e-3
)";

}  // namespace fp8::jobspec::testing
