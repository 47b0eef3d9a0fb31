// A KeyValueStore over a directory: one file per key. For standalone runs (fp8-train with
// N local ranks) and for machines that share a file system.
//
// set() writes a temporary file next to the value and rename()s it into place, so a reader
// sees the old value or the whole new one (rename is atomic on POSIX file systems; NFS
// keeps that for renames within one directory). get() and wait() poll the directory with
// short sleeps (1 ms, backing off to 50 ms): rendezvous happens once per job attempt, so
// polling is cheaper than it is clever.
//
// Keys may hold any bytes; they are percent-encoded into file names (see file_name_for).
// Thread-safe: the object keeps no mutable state besides the directory's files, and
// several processes may share one directory.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/engine/collectives/kv_store.h"

namespace fp8::engine::collectives {

class FileStore final : public KeyValueStore {
 public:
  // Creates `dir` (and its parents) if missing. FailedPrecondition naming the directory
  // when it cannot be created, is not a directory, or cannot be written.
  static absl::StatusOr<std::unique_ptr<FileStore>> open(std::filesystem::path dir);

  absl::Status set(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout) override;
  absl::Status wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> contains(std::string_view key) override;
  std::string describe() const override;  // "file store /tmp/rdzv"

  const std::filesystem::path& dir() const { return dir_; }

  // The file name a key is stored under: bytes outside [A-Za-z0-9_-] become %XX. '.' is
  // encoded too, so that no key can name ".", "..", or another key's temporary file
  // ("<name>.tmp.<pid>.<random>"). InvalidArgument for an empty key or one whose name
  // would exceed the file system's 255-byte limit.
  static absl::StatusOr<std::string> file_name_for(std::string_view key);

 private:
  explicit FileStore(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // The value if the file exists, NotFound if it does not, another error otherwise.
  absl::StatusOr<std::string> read_if_present(std::string_view key, const std::filesystem::path& path) const;

  std::filesystem::path dir_;
};

}  // namespace fp8::engine::collectives
