// The key-value store ranks meet through (rendezvous): rank 0 publishes what the others
// need (Gloo's addresses, NCCL's unique id), every rank blocks until it appears.
//
// Implementations: FileStore (file_store.h) for standalone runs on one machine or a
// shared file system; CoordinatorStore (worker/fp8_train/coordinator_store.h), the
// coordinator's RendezvousService, outside the engine. The engine only sees this
// interface: it knows nothing of gRPC (docs/architecture.md).
//
// Keys are plain strings ("job-7/attempt-2/gloo/rank-1"); a job attempt namespaces its keys
// with a prefix so that a restarted attempt never reads the last one's values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fp8::engine::collectives {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Publishes `value` under `key`, replacing an older value. Readers see either the old
  // or the whole new value, never part of one.
  virtual absl::Status set(std::string_view key, std::string_view value) = 0;

  // The value of `key`, waiting until it is set. DeadlineExceeded naming the key (and the
  // store) when `timeout` passes first.
  virtual absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout) = 0;

  // Waits until every key is set; DeadlineExceeded naming the keys still missing.
  virtual absl::Status wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;

  // Whether `key` is set now, without waiting.
  virtual absl::StatusOr<bool> contains(std::string_view key) = 0;

  // Where the store lives, for error messages ("file store /tmp/rdzv").
  virtual std::string describe() const = 0;
};

}  // namespace fp8::engine::collectives
