// The coordinator's claim on its state: one coordinator per database, and no silent fresh
// start over a state that was lost.
//
// Two coordinators on one state would both schedule the same queued jobs (a job trained
// twice into one checkpoint folder): the first to start holds an exclusive lock
// (flock) on `<database>.lock` for as long as it runs, and a second one refuses to start,
// naming the holder's pid. The lock goes with the process, kill -9 included.
//
// A coordinator whose state folder holds the tokens of a first start but whose database
// is missing, empty or holds no token has lost its state (a deleted or truncated file, a
// volume mounted empty): starting afresh would write new tokens over the ones every
// worker and user holds and forget every job, so it refuses instead.
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fp8::server {

class StateLock {
 public:
  // FAILED_PRECONDITION when another process holds it ("... held by pid 1234"); the
  // lock file is created if needed and gets this process's pid.
  static absl::StatusOr<StateLock> acquire(const std::filesystem::path& database);
  StateLock(StateLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  StateLock& operator=(StateLock&&) = delete;
  ~StateLock();

 private:
  explicit StateLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// The first-start token files the coordinator writes into its state folder.
inline constexpr const char* kFirstStartTokenFiles[] = {"fp8-admin.token", "fp8-worker.token"};

// Before the database is opened: FAILED_PRECONDITION when first-start token files exist
// in `state_dir` but `database` is missing or empty.
absl::Status check_database_before_open(const std::filesystem::path& state_dir, const std::filesystem::path& database);

// After it is opened: FAILED_PRECONDITION when first-start token files exist but the
// database holds `tokens` == 0.
absl::Status check_database_tokens(const std::filesystem::path& state_dir, const std::filesystem::path& database,
                                 int64_t tokens);

}  // namespace fp8::server
