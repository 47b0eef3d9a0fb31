// The POSIX file operations durable checkpoints need and iostreams lack: fsync of files
// and directories, rename, and positioned reads. Every error names the path.
//
// Durability recipe used throughout (write-to-temp then rename):
//   1. write `<name>.tmp` in the destination directory, 2. fsync it, 3. rename it over
//   `<name>` (atomic within a filesystem), 4. fsync the directory so the rename itself
//   survives a power cut. A reader therefore sees the old file, or the whole new one,
//   never a partial one under the final name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fp8::checkpoint {

// Suffix of files being written; readers ignore such files.
inline constexpr std::string_view kTempSuffix = ".tmp";
std::filesystem::path temp_path_for(const std::filesystem::path& final_path);

// A file opened for writing, truncated. Move-only; the destructor closes it (without
// fsync: a file that matters is sync()ed and close()d explicitly).
class OutputFile {
 public:
  static absl::StatusOr<OutputFile> create(std::filesystem::path path);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  ~OutputFile();

  // Writes all of `data` straight from the caller's memory (no copy).
  absl::Status write(std::span<const std::byte> data);
  absl::Status sync();
  absl::Status close();
  const std::filesystem::path& path() const { return path_; }

 private:
  OutputFile(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_ = -1;
};

// A file opened for positioned reads. Move-only.
class InputFile {
 public:
  // A symbolic link as the file itself is refused unless `follow_links` (O_NOFOLLOW): a
  // folder opened beneath a root (/proc/self/fd/N) then cannot lead out of it.
  static absl::StatusOr<InputFile> open(std::filesystem::path path, bool follow_links = true);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  ~InputFile();

  uint64_t size() const { return size_; }
  // Fills `out` from `offset`; DataLoss if the file ends first (it shrank after Open).
  absl::Status read_at(uint64_t offset, std::span<std::byte> out) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  InputFile(std::filesystem::path path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

absl::Status sync_directory(const std::filesystem::path& dir);

// rename(2) then fsync of the destination's directory.
absl::Status rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// The whole recipe above for a small file held in memory.
absl::Status write_file_durably(const std::filesystem::path& path, std::string_view contents);

// Reads a small file whole (the commit marker). NotFound if it does not exist.
absl::StatusOr<std::string> read_small_file(const std::filesystem::path& path, size_t max_bytes);

// Creates `dir` and missing parents, fsyncing each parent whose entries changed so the new
// directories survive a crash.
absl::Status create_directories_durably(const std::filesystem::path& dir);

}  // namespace fp8::checkpoint
