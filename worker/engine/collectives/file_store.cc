#include "worker/engine/collectives/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace fp8::engine::collectives {
namespace {

// POSIX NAME_MAX on every file system we run on; the temporary file's suffix needs room.
constexpr size_t kMaxFileName = 255;
constexpr size_t kTempSuffixRoom = 48;

constexpr absl::Duration kFirstPoll = absl::Milliseconds(1);
constexpr absl::Duration kLongestPoll = absl::Milliseconds(50);

bool kept_as_is(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Sleeps between polls: 1 ms first (a peer that is about to publish usually has), then
// doubling up to 50 ms so that a long wait costs little, never past the deadline.
class Backoff {
 public:
  explicit Backoff(absl::Time deadline) : deadline_(deadline) {}

  // False once the deadline has passed (after one last poll is due).
  bool sleep() {
    const absl::Time now = absl::Now();
    if (now >= deadline_) return false;
    absl::SleepFor(std::min(next_, deadline_ - now));
    next_ = std::min(next_ * 2, kLongestPoll);
    return true;
  }

 private:
  absl::Time deadline_;
  absl::Duration next_ = kFirstPoll;
};

absl::Time deadline_after(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
}

// Unique among processes (pid) and among threads and calls of one process (counter), and
// across pid reuse (random start).
std::string temp_suffix() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return absl::StrCat(".tmp.", ::getpid(), ".", counter.fetch_add(1, std::memory_order_relaxed));
}

absl::Status write_all(int fd, std::string_view data, const std::filesystem::path& path) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("file store: cannot write ", path.string()));
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::open(std::filesystem::path dir) {
  if (dir.empty()) return absl::InvalidArgumentError("file store: empty directory path");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("file store: cannot create directory ", dir.string(), ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat("file store: ", dir.string(), " is not a directory"));
  }
  // Every rank writes its own keys, so a directory we can only read is as bad as none.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("file store: directory ", dir.string(), " is not writable: ", std::strerror(errno)));
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(dir)));
}

absl::StatusOr<std::string> FileStore::file_name_for(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("file store: empty key");
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (kept_as_is(c)) {
      name.push_back(ch);
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 0xF]);
    }
  }
  if (name.size() + kTempSuffixRoom > kMaxFileName) {
    return absl::InvalidArgumentError(absl::StrCat("file store: key '", std::string(key), "' is too long (", name.size(),
                                                   " bytes once encoded as a file name; at most ",
                                                   kMaxFileName - kTempSuffixRoom, ")"));
  }
  return name;
}

absl::Status FileStore::set(std::string_view key, std::string_view value) {
  absl::StatusOr<std::string> name = file_name_for(key);
  if (!name.ok()) return name.status();
  const std::filesystem::path final_path = dir_ / *name;
  const std::filesystem::path temp_path = dir_ / (*name + temp_suffix());

  // O_EXCL: a leftover file of the same name (it cannot be ours) is an error, not a file
  // to scribble over.
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("file store: cannot create ", temp_path.string()));
  absl::Status status = write_all(fd, value, temp_path);
  // close(2) can report a deferred write error (NFS); never retry it.
  if (::close(fd) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("file store: cannot close ", temp_path.string()));
  }
  // No fsync: a rendezvous value is worthless after a machine crash, and readers on other
  // machines see it through the file system whether or not it reached the disk.
  if (status.ok() && ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    status = absl::ErrnoToStatus(
        errno, absl::StrCat("file store: cannot rename ", temp_path.string(), " to ", final_path.string()));
  }
  if (!status.ok()) ::unlink(temp_path.c_str());
  return status;
}

absl::StatusOr<std::string> FileStore::read_if_present(std::string_view key, const std::filesystem::path& path) const {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(describe(), ": no key '", std::string(key), "'"));
    return absl::ErrnoToStatus(errno, absl::StrCat("file store: cannot open ", path.string()));
  }
  // The file was complete when it was renamed into place and is never written again (a
  // new value is a new file), so reading to EOF gives one whole value.
  std::string value;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      ::close(fd);
      return absl::ErrnoToStatus(error_number, absl::StrCat("file store: cannot read ", path.string()));
    }
    if (got == 0) break;
    value.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  return value;
}

absl::StatusOr<std::string> FileStore::get(std::string_view key, absl::Duration timeout) {
  absl::StatusOr<std::string> name = file_name_for(key);
  if (!name.ok()) return name.status();
  const std::filesystem::path path = dir_ / *name;
  Backoff backoff(deadline_after(timeout));
  for (;;) {
    absl::StatusOr<std::string> value = read_if_present(key, path);
    if (!absl::IsNotFound(value.status())) return value;
    if (!backoff.sleep()) {
      return absl::DeadlineExceededError(
          absl::StrCat(describe(), ": key '", std::string(key), "' was not set within ", absl::FormatDuration(timeout)));
    }
  }
}

absl::Status FileStore::wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  // Check every key's name first: a bad key should fail now, not after the timeout.
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> name = file_name_for(key);
    if (!name.ok()) return name.status();
    missing.push_back(key);
  }
  Backoff backoff(deadline_after(timeout));
  for (;;) {
    std::vector<std::string> still_missing;
    for (const std::string& key : missing) {
      absl::StatusOr<bool> present = contains(key);
      if (!present.ok()) return present.status();
      if (!*present) still_missing.push_back(key);
    }
    missing = std::move(still_missing);
    if (missing.empty()) return absl::OkStatus();
    if (!backoff.sleep()) {
      return absl::DeadlineExceededError(absl::StrCat(describe(), ": ", missing.size(), " of ", keys.size(),
                                                      " keys not set within ", absl::FormatDuration(timeout), ": '",
                                                      absl::StrJoin(missing, "', '"), "'"));
    }
  }
}

absl::StatusOr<bool> FileStore::contains(std::string_view key) {
  absl::StatusOr<std::string> name = file_name_for(key);
  if (!name.ok()) return name.status();
  const std::filesystem::path path = dir_ / *name;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return absl::ErrnoToStatus(errno, absl::StrCat("file store: cannot stat ", path.string()));
}

std::string FileStore::describe() const { return absl::StrCat("file store ", dir_.string()); }

}  // namespace fp8::engine::collectives
