#include "worker/fp8_data/inputs.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "worker/engine/data/file_pattern.h"

namespace fp8::data_cli {

namespace fs = std::filesystem;

absl::StatusOr<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    if (!engine::data::is_file_pattern(input)) {
      if (!fs::is_regular_file(input)) return absl::NotFoundError(absl::StrCat(input, ": no such file"));
      files.push_back(input);
      continue;
    }
    absl::StatusOr<std::vector<std::string>> matches = engine::data::expand_file_pattern(input, "input");
    if (!matches.ok()) return matches.status();
    files.insert(files.end(), matches->begin(), matches->end());
  }
  if (files.empty()) return absl::InvalidArgumentError("no input files");
  return files;
}

absl::StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return text.str();
}

}  // namespace fp8::data_cli
