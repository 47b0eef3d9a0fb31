#include "worker/engine/data/file_pattern.h"

#include <glob.h>

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace fp8::engine::data {

bool is_file_pattern(std::string_view path) { return path.find_first_of("*?[") != std::string_view::npos; }

absl::StatusOr<std::vector<std::string>> expand_file_pattern(const std::string& pattern, const std::string& field) {
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  for (size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) {
    if (std::filesystem::is_regular_file(matches.gl_pathv[i])) files.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": cannot expand '", pattern, "'"));
  }
  if (files.empty()) return absl::NotFoundError(absl::StrCat(field, ": no file matches '", pattern, "'"));
  return files;
}

}  // namespace fp8::engine::data
