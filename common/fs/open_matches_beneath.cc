#include "common/fs/open_matches_beneath.h"

#include <glob.h>

#include "absl/strings/str_cat.h"

namespace fp8::fs_confined {

bool is_glob_pattern(std::string_view path) { return path.find_first_of("*?[") != std::string_view::npos; }

absl::StatusOr<OpenMatches> open_matches_beneath(const std::filesystem::path& root, const std::string& pattern,
                                               const char* field) {
  if (!is_beneath(root, pattern)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", pattern, "' is not beneath ", root.string()));
  }
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  if (rc == GLOB_NOMATCH) {
    return absl::NotFoundError(absl::StrCat(field, ": no file matches '", pattern, "'"));
  }
  OpenMatches out;
  if (rc == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) out.paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (rc != 0) return absl::InvalidArgumentError(absl::StrCat(field, ": cannot expand '", pattern, "'"));
  for (const std::string& path : out.paths) {
    absl::StatusOr<UniqueFd> file = open_file_beneath(root, path, field);
    if (!file.ok()) return file.status();
    out.files.push_back(*std::move(file));
  }
  return out;
}

}  // namespace fp8::fs_confined
