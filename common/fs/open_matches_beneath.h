// A job's data given as a glob pattern (many token shards): every match opened beneath the
// data root as OpenFileBeneath opens one file, so that no match can lead out of the root.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fs/open_beneath.h"

namespace fp8::fs_confined {

// Whether `path` holds a glob(3) metacharacter: '*', '?' or '['.
bool is_glob_pattern(std::string_view path);

struct OpenMatches {
  std::vector<std::string> paths;  // the matches, in glob(3)'s sorted order
  std::vector<UniqueFd> files;     // each opened beneath the root
};

// The regular files matching `pattern` (absolute, lexically under `root`), each opened with
// OpenFileBeneath. NOT_FOUND when nothing matches; a match that is a link or lies outside
// the root fails as OpenFileBeneath says. `field` ("data.path") starts every message.
absl::StatusOr<OpenMatches> open_matches_beneath(const std::filesystem::path& root, const std::string& pattern,
                                               const char* field);

}  // namespace fp8::fs_confined
