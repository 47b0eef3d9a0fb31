#include "common/fs/open_beneath.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fp8::fs_confined {
namespace {

namespace fs = std::filesystem;

// The components of `path` below `root`, or INVALID_ARGUMENT.
absl::StatusOr<std::vector<std::string>> parts_below(const fs::path& root, const fs::path& path, const char* field) {
  if (!path.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path.string(), "' is not an absolute path"));
  }
  auto r = root.begin(), p = path.begin();
  for (; r != root.end(); ++r) {
    if (r->empty()) continue;  // a trailing '/' on the root
    if (p == path.end() || *p != *r) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": '", path.string(), "' is not under its root ", root.string()));
    }
    ++p;
  }
  std::vector<std::string> parts;
  for (; p != path.end(); ++p) {
    if (p->empty()) continue;
    if (*p == "." || *p == "..") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", path.string(), "' contains '", p->string(), "'"));
    }
    parts.push_back(p->string());
  }
  return parts;
}

// Why opening `name` in `dir` failed with `error`. A link opened with O_NOFOLLOW fails
// with ELOOP, or with ENOTDIR where a folder was asked for: lstat tells which it was.
absl::Status open_error(const char* field, const fs::path& path, const fs::path& at, int dir, const std::string& name,
                       int error) {
  struct stat st {};
  const bool link = ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
  std::string why = link                ? "is a symbolic link (not followed beneath the root)"
                    : error == ENOTDIR ? "is not a folder"
                    : error == ENOENT  ? "does not exist"
                                       : std::strerror(error);
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", path.string(), "': ", at.string(), " ", why));
}

absl::StatusOr<UniqueFd> open_root(const fs::path& root, const char* field) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": its root ", root.string(), ": ", std::strerror(errno)));
  }
  return fd;
}

// Opens (creating when `create`) each folder of parts[0..n) beneath `dir`.
absl::StatusOr<UniqueFd> walk_folders(UniqueFd dir, const fs::path& root, const std::vector<std::string>& parts,
                                     size_t n, bool create, const fs::path& path, const char* field) {
  fs::path at = root;
  for (size_t i = 0; i < n; ++i) {
    at /= parts[i];
    if (create && ::mkdirat(dir.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      return open_error(field, path, at, dir.get(), parts[i], errno);
    }
    UniqueFd next(::openat(dir.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.get() < 0) return open_error(field, path, at, dir.get(), parts[i], errno);
    dir = std::move(next);
  }
  return dir;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::StatusOr<UniqueFd> open_file_beneath(const fs::path& root, const fs::path& path, const char* field) {
  absl::StatusOr<std::vector<std::string>> parts = parts_below(root, path, field);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": '", path.string(), "' is its root"));
  absl::StatusOr<UniqueFd> dir = open_root(root, field);
  if (!dir.ok()) return dir.status();
  dir = walk_folders(std::move(*dir), root, *parts, parts->size() - 1, /*create=*/false, path, field);
  if (!dir.ok()) return dir.status();
  UniqueFd file(::openat(dir->get(), parts->back().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (file.get() < 0) return open_error(field, path, path, dir->get(), parts->back(), errno);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path.string(), "' is not a regular file"));
  }
  return file;
}

namespace {

// The folder `path` itself, walked to from the root (each folder created first if `create`).
absl::StatusOr<UniqueFd> open_folder_beneath(const fs::path& root, const fs::path& path, bool create,
                                           const char* field) {
  absl::StatusOr<std::vector<std::string>> parts = parts_below(root, path, field);
  if (!parts.ok()) return parts.status();
  absl::StatusOr<UniqueFd> dir = open_root(root, field);
  if (!dir.ok()) return dir.status();
  return walk_folders(std::move(*dir), root, *parts, parts->size(), create, path, field);
}

}  // namespace

absl::StatusOr<UniqueFd> open_dir_beneath(const fs::path& root, const fs::path& path, const char* field) {
  return open_folder_beneath(root, path, /*create=*/false, field);
}

absl::StatusOr<UniqueFd> make_dirs_beneath(const fs::path& root, const fs::path& path, const char* field) {
  return open_folder_beneath(root, path, /*create=*/true, field);
}

bool is_beneath(const fs::path& root, const fs::path& path) { return parts_below(root, path, "").ok(); }

fs::path fd_path(int fd) { return fs::path("/proc/self/fd") / std::to_string(fd); }

}  // namespace fp8::fs_confined
