// Opening a path that must stay beneath a root folder, without following any symbolic
// link from the root down: each component is opened relative to the one before with
// O_NOFOLLOW, so a link anywhere below the root (one planted before the check, or
// swapped in after it) makes the open fail instead of leading elsewhere. The root itself
// is opened as configured (an operator's folder may be a link).
//
// The coordinator checks a job's paths when it admits them; the worker and the trainer
// open them through here, so a path that passed then cannot escape now.
#pragma once

#include <filesystem>

#include "absl/status/statusor.h"

namespace fp8::fs_confined {

// An open file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// Opens `path` (absolute, lexically under `root`, no "." or ".." parts) for reading; a
// regular file only. INVALID_ARGUMENT naming the path and the component that is a link,
// or is missing, or is not a directory; `field` ("data.path") starts the message.
absl::StatusOr<UniqueFd> open_file_beneath(const std::filesystem::path& root, const std::filesystem::path& path,
                                         const char* field);

// Opens the existing folder `path` beneath `root` the same way (O_DIRECTORY).
absl::StatusOr<UniqueFd> open_dir_beneath(const std::filesystem::path& root, const std::filesystem::path& path,
                                        const char* field);

// Opens the folder `path` beneath `root` the same way, creating the folders that do not
// exist yet (mode 0755), and returns it opened (O_DIRECTORY).
absl::StatusOr<UniqueFd> make_dirs_beneath(const std::filesystem::path& root, const std::filesystem::path& path,
                                         const char* field);

// Whether `path` is absolute, free of "." and ".." parts and lexically under `root`.
bool is_beneath(const std::filesystem::path& root, const std::filesystem::path& path);

// "/proc/self/fd/<fd>": a path that names what `fd` has open, whatever happens to the
// path it was opened by, for code that takes paths.
std::filesystem::path fd_path(int fd);

}  // namespace fp8::fs_confined
