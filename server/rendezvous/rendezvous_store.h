// The coordinator's rendezvous store: a key-value map per namespace (one namespace per job
// attempt, "job-7/attempt-2/"), with blocking reads, in the manner of torch's TCPStore.
// RendezvousServiceImpl (rendezvous_service.h) serves it over gRPC; this class knows
// nothing of gRPC so that unit tests drive it directly.
//
// Limits and error codes are rendezvous_service.proto's; errors name the proto field
// ("key: longer than 256 bytes") so that the service can pass them through unchanged.
//
// A deleted namespace stays closed for the life of the store: every call on it answers
// ABORTED, including calls that were blocked on it when it was deleted. An attempt's
// namespace is never reused (a restart gets attempt n+1), so a late rank of an ended
// attempt must not silently start a fresh, empty namespace and wait there for peers that
// are gone. The closed set grows by one short string per ended attempt.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fp8::server {

class RendezvousStore {
 public:
  static constexpr size_t kMaxNamespaceBytes = 128;
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxKeysPerNamespace = 4096;
  static constexpr size_t kMaxWaitKeys = 4096;
  static constexpr absl::Duration kMaxTimeout = absl::Milliseconds(600'000);

  // Polled while a call blocks (about every 100 ms); true ends the call CANCELLED. The
  // service passes the gRPC call's IsCancelled so that a client that gave up frees its
  // server thread.
  using CancelledFn = std::function<bool()>;

  RendezvousStore() = default;
  RendezvousStore(const RendezvousStore&) = delete;
  RendezvousStore& operator=(const RendezvousStore&) = delete;

  // Sets (or overwrites) a key and wakes its waiters. RESOURCE_EXHAUSTED when a new key
  // would be the namespace's 4097th.
  absl::Status set(std::string_view ns, std::string_view key, std::string_view value);

  // The key's value, blocking up to `timeout` (in [0, 600 s]; 0 checks once).
  // DEADLINE_EXCEEDED naming the key when it stays unset.
  absl::StatusOr<std::string> get(std::string_view ns, std::string_view key, absl::Duration timeout,
                                  const CancelledFn& cancelled = nullptr);

  // Blocks until every key (1 to 4096 of them) is set; DEADLINE_EXCEEDED naming the keys
  // still missing.
  absl::Status wait(std::string_view ns, const std::vector<std::string>& keys, absl::Duration timeout,
                    const CancelledFn& cancelled = nullptr);

  // Drops the namespace's keys and closes it: blocked and later calls on it answer ABORTED.
  void delete_namespace(std::string_view ns);

  // The coordinator is stopping: every blocked and later call answers UNAVAILABLE.
  void shutdown();

  // Number of keys set in `ns` (0 for an unknown or closed namespace); for tests and metrics.
  size_t key_count(std::string_view ns) const;

  // Field checks, exposed so the service can validate before authorizing.
  static absl::Status validate_namespace(std::string_view ns);
  static absl::Status validate_key(std::string_view key, std::string_view field = "key");

 private:
  // OK when calls on `ns` may proceed; ABORTED / UNAVAILABLE otherwise.
  absl::Status usable(const std::string& ns) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Blocks until `done()` holds, the namespace closes, the store shuts down, `deadline`
  // passes or the caller cancels. OK only when done() holds.
  absl::Status block_until(const std::string& ns, const std::function<bool()>& done, absl::Time deadline,
                           const CancelledFn& cancelled) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every set, delete_namespace and shutdown
  std::map<std::string, std::map<std::string, std::string, std::less<>>, std::less<>> values_ ABSL_GUARDED_BY(mu_);
  std::set<std::string, std::less<>> closed_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fp8::server
