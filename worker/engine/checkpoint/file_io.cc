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

absl::Status ErrnoError(int error_number, const std::filesystem::path& path, std::string_view operation) {
  return absl::ErrnoToStatus(error_number, Cat(path.string(), ": ", operation));
}

// The directory an entry lives in; "." for a bare relative name.
std::filesystem::path ParentOf(const std::filesystem::path& path) {
  std::filesystem::path parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

// One write(2) is capped below 2 GiB on Linux; smaller chunks also bound how long one call
// blocks. The data is not copied: each chunk is written from the caller's memory.
constexpr size_t kMaxWriteChunk = size_t{64} << 20;

}  // namespace

std::filesystem::path TempPathFor(const std::filesystem::path& final_path) {
  std::filesystem::path temp = final_path;
  temp += kTempSuffix;
  return temp;
}

// ---- OutputFile ----------------------------------------------------------------------------

absl::StatusOr<OutputFile> OutputFile::Create(std::filesystem::path path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, path, "cannot create");
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

absl::Status OutputFile::Write(std::span<const std::byte> data) {
  if (fd_ < 0) return absl::FailedPreconditionError(Cat(path_.string(), ": write after close"));
  while (!data.empty()) {
    const size_t chunk = std::min(data.size(), kMaxWriteChunk);
    const ssize_t written = ::write(fd_, data.data(), chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path_, "write failed");
    }
    data = data.subspan(static_cast<size_t>(written));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Sync() {
  if (fd_ < 0) return absl::FailedPreconditionError(Cat(path_.string(), ": fsync after close"));
  if (::fsync(fd_) != 0) return ErrnoError(errno, path_, "fsync failed");
  return absl::OkStatus();
}

absl::Status OutputFile::Close() {
  if (fd_ < 0) return absl::OkStatus();
  const int fd = fd_;
  fd_ = -1;
  // close(2) can report a deferred write error (NFS); never retry it, even on EINTR.
  if (::close(fd) != 0) return ErrnoError(errno, path_, "close failed");
  return absl::OkStatus();
}

// ---- InputFile -----------------------------------------------------------------------------

absl::StatusOr<InputFile> InputFile::Open(std::filesystem::path path, bool follow_links) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) return ErrnoError(errno, path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error_number = errno;
    ::close(fd);
    return ErrnoError(error_number, path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(Cat(path.string(), ": not a regular file"));
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

absl::Status InputFile::ReadAt(uint64_t offset, std::span<std::byte> out) const {
  while (!out.empty()) {
    const size_t chunk = std::min(out.size(), kMaxWriteChunk);
    const ssize_t got = ::pread(fd_, out.data(), chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path_, "read failed");
    }
    if (got == 0) {
      return absl::DataLossError(Cat(path_.string(), ": truncated: file ended at byte ", offset,
                                     " while reading (it shrank after it was opened)"));
    }
    offset += static_cast<uint64_t>(got);
    out = out.subspan(static_cast<size_t>(got));
  }
  return absl::OkStatus();
}

// ---- directories and whole files ----------------------------------------------------------

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, dir, "cannot open directory to fsync it");
  const int result = ::fsync(fd);
  const int error_number = errno;
  ::close(fd);
  if (result != 0) return ErrnoError(error_number, dir, "fsync of directory failed");
  return absl::OkStatus();
}

absl::Status RenameDurably(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoError(errno, from, Cat("cannot rename to ", to.string()));
  }
  return SyncDirectory(ParentOf(to));
}

absl::Status WriteFileDurably(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path temp = TempPathFor(path);
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<OutputFile> file = OutputFile::Create(temp);
    if (!file.ok()) return file.status();
    if (absl::Status s = file->Write(AsBytes(contents)); !s.ok()) return s;
    if (absl::Status s = file->Sync(); !s.ok()) return s;
    if (absl::Status s = file->Close(); !s.ok()) return s;
    return RenameDurably(temp, path);
  }();
  if (!status.ok()) ::unlink(temp.c_str());  // best effort: readers ignore .tmp files anyway
  return status;
}

absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path, size_t max_bytes) {
  absl::StatusOr<InputFile> file = InputFile::Open(path);
  if (!file.ok()) return file.status();
  if (file->size() > max_bytes) {
    return absl::DataLossError(
        Cat(path.string(), ": ", file->size(), " bytes is too large (at most ", max_bytes, " expected)"));
  }
  std::string contents(file->size(), '\0');
  if (absl::Status s = file->ReadAt(0, std::as_writable_bytes(std::span(contents))); !s.ok()) return s;
  return contents;
}

absl::Status CreateDirectoriesDurably(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    // EEXIST is fine: another rank may create the same directory at the same moment.
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError(errno, *it, "cannot create directory");
    if (absl::Status s = SyncDirectory(ParentOf(*it)); !s.ok()) return s;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(Cat(dir.string(), ": exists but is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace fp8::checkpoint
