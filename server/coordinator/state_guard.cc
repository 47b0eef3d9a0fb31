#include "server/coordinator/state_guard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace fp8::server {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> token_files_in(const fs::path& state_dir) {
  std::vector<std::string> found;
  for (const char* name : kFirstStartTokenFiles) {
    std::error_code ec;
    if (fs::exists(state_dir / name, ec)) found.push_back(name);
  }
  return found;
}

absl::Status lost_state(const fs::path& state_dir, const std::vector<std::string>& tokens, const fs::path& database,
                       const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(
      state_dir.string(), " holds the tokens of an earlier start (", absl::StrJoin(tokens, ", "), ") but the database ",
      database.string(), " ", what, ": the state was lost or replaced. Restore the database from a backup "
      "(server/README.md), or remove the token files to start afresh with new tokens"));
}

}  // namespace

absl::StatusOr<StateLock> StateLock::acquire(const fs::path& database) {
  const fs::path path = database.string() + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot open the state lock ", path.string(), ": ",
                                                      std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    int64_t pid = 0;
    const bool known = n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &pid);
    if (error == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another fp8-coordinator", known ? absl::StrCat(" (pid ", pid, ")") : "", " is running on the state ",
          database.string(), " (it holds ", path.string(), "); one state has one coordinator"));
    }
    return absl::FailedPreconditionError(absl::StrCat("cannot lock ", path.string(), ": ", std::strerror(error)));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds either way; the pid is only for the other coordinator's message.
  }
  return StateLock(fd);
}

StateLock::~StateLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

absl::Status check_database_before_open(const fs::path& state_dir, const fs::path& database) {
  const std::vector<std::string> tokens = token_files_in(state_dir);
  if (tokens.empty()) return absl::OkStatus();
  std::error_code ec;
  if (!fs::exists(database, ec)) return lost_state(state_dir, tokens, database, "does not exist");
  if (fs::file_size(database, ec) == 0 && !ec) return lost_state(state_dir, tokens, database, "is empty");
  return absl::OkStatus();
}

absl::Status check_database_tokens(const fs::path& state_dir, const fs::path& database, int64_t tokens) {
  const std::vector<std::string> files = token_files_in(state_dir);
  if (files.empty() || tokens > 0) return absl::OkStatus();
  return lost_state(state_dir, files, database, "holds no token");
}

}  // namespace fp8::server
