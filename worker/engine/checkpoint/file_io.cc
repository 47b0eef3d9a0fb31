#include "worker/engine/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

absl::Status errno_error(int error_number, const std::filesystem::path& path, std::string_view operation) {
  return absl::ErrnoToStatus(error_number, cat(path.string(), ": ", operation));
}

// The directory an entry lives in; "." for a bare relative name.
std::filesystem::path parent_of(const std::filesystem::path& path) {
  std::filesystem::path parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

// One write(2) is capped below 2 GiB on Linux; smaller chunks also bound how long one call
// blocks. The data is not copied: each chunk is written from the caller's memory.
constexpr size_t kMaxWriteChunk = size_t{64} << 20;

}  // namespace

std::filesystem::path temp_path_for(const std::filesystem::path& final_path) {
  std::filesystem::path temp = final_path;
  temp += kTempSuffix;
  return temp;
}

// ---- OutputFile ----------------------------------------------------------------------------

absl::StatusOr<OutputFile> OutputFile::create(std::filesystem::path path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error(errno, path, "cannot create");
  return OutputFile(std::move(path), fd);
}

OutputFile::OutputFile(OutputFile&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) { other.fd_ = -1; }

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status OutputFile::write(std::span<const std::byte> data) {
  if (fd_ < 0) return absl::FailedPreconditionError(cat(path_.string(), ": write after close"));
  while (!data.empty()) {
    const size_t chunk = std::min(data.size(), kMaxWriteChunk);
    const ssize_t written = ::write(fd_, data.data(), chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno_error(errno, path_, "write failed");
    }
    data = data.subspan(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::sync() {
  if (fd_ < 0) return absl::FailedPreconditionError(cat(path_.string(), ": fsync after close"));
  if (::fsync(fd_) != 0) return errno_error(errno, path_, "fsync failed");
  return absl::OkStatus();
}

absl::Status OutputFile::close() {
  if (fd_ < 0) return absl::OkStatus();
  const int fd = fd_;
  fd_ = -1;
  // close(2) can report a deferred write error (NFS); never retry it, even on EINTR.
  if (::close(fd) != 0) return errno_error(errno, path_, "close failed");
  return absl::OkStatus();
}

// ---- InputFile -----------------------------------------------------------------------------

absl::StatusOr<InputFile> InputFile::open(std::filesystem::path path, bool follow_links) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) return errno_error(errno, path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error_number = errno;
    ::close(fd);
    return errno_error(error_number, path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(cat(path.string(), ": not a regular file"));
  }
  return InputFile(std::move(path), fd, static_cast<uint64_t>(st.st_size));
}

InputFile::InputFile(InputFile&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status InputFile::read_at(uint64_t offset, std::span<std::byte> out) const {
  while (!out.empty()) {
    const size_t chunk = std::min(out.size(), kMaxWriteChunk);
    const ssize_t got = ::pread(fd_, out.data(), chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno_error(errno, path_, "read failed");
    }
    if (got == 0) {
      return absl::DataLossError(cat(path_.string(), ": truncated: file ended at byte ", offset,
                                     " while reading (it shrank after it was opened)"));
    }
    offset += static_cast<uint64_t>(got);
    out = out.subspan(static_cast<size_t>(got));
  }
  return absl::OkStatus();
}

// ---- directories and whole files ----------------------------------------------------------

absl::Status sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, dir, "cannot open directory to fsync it");
  const int result = ::fsync(fd);
  const int error_number = errno;
  ::close(fd);
  if (result != 0) return errno_error(error_number, dir, "fsync of directory failed");
  return absl::OkStatus();
}

absl::Status rename_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return errno_error(errno, from, cat("cannot rename to ", to.string()));
  }
  return sync_directory(parent_of(to));
}

absl::Status write_file_durably(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path temp = temp_path_for(path);
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<OutputFile> file = OutputFile::create(temp);
    if (!file.ok()) return file.status();
    if (absl::Status s = file->write(as_bytes(contents)); !s.ok()) return s;
    if (absl::Status s = file->sync(); !s.ok()) return s;
    if (absl::Status s = file->close(); !s.ok()) return s;
    return rename_durably(temp, path);
  }();
  if (!status.ok()) ::unlink(temp.c_str());  // best effort: readers ignore .tmp files anyway
  return status;
}

absl::StatusOr<std::string> read_small_file(const std::filesystem::path& path, size_t max_bytes) {
  absl::StatusOr<InputFile> file = InputFile::open(path);
  if (!file.ok()) return file.status();
  if (file->size() > max_bytes) {
    return absl::DataLossError(
        cat(path.string(), ": ", file->size(), " bytes is too large (at most ", max_bytes, " expected)"));
  }
  std::string contents(file->size(), '\0');
  if (absl::Status s = file->read_at(0, std::as_writable_bytes(std::span(contents))); !s.ok()) return s;
  return contents;
}

absl::Status create_directories_durably(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    // EEXIST is fine: another rank may create the same directory at the same moment.
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) return errno_error(errno, *it, "cannot create directory");
    if (absl::Status s = sync_directory(parent_of(*it)); !s.ok()) return s;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(cat(dir.string(), ": exists but is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace fp8::checkpoint
