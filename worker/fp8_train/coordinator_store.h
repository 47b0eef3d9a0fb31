// The rendezvous KeyValueStore of a rank the worker daemon started: the coordinator's
// RendezvousService (proto/fp8/v1/rendezvous_service.proto), one namespace per attempt.
// It lives here, beside fp8-train's main, and not in worker/engine/, because the engine
// knows nothing of gRPC (docs/architecture.md); the engine sees only KeyValueStore.
//
// Every call carries "authorization: Bearer <trainer token>". UNAVAILABLE is retried with
// short backoff until the call's time runs out, since a coordinator restarting keeps its
// state and comes back. ABORTED (the attempt ended and its namespace was deleted) and
// every other error return at once. Errors keep the coordinator's status code and name the
// store: "coordinator rendezvous at HOST:PORT, namespace job-7/attempt-2/: ...".
//
// Thread-safe (gRPC stubs are).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fp8/v1/rendezvous_service.grpc.pb.h"
#include "worker/engine/collectives/kv_store.h"

namespace fp8::train_cli {

struct CoordinatorStoreOptions {
  std::string address;               // host:port, for messages
  std::string rendezvous_namespace;  // "job-7/attempt-2/"
  std::string token;                 // the attempt's trainer token
  // How long set() and contains() keep retrying an unreachable coordinator.
  absl::Duration retry_window = absl::Minutes(5);
};

class CoordinatorStore final : public engine::collectives::KeyValueStore {
 public:
  CoordinatorStore(std::shared_ptr<grpc::Channel> channel, CoordinatorStoreOptions options);

  absl::Status set(std::string_view key, std::string_view value) override;
  absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout) override;
  absl::Status wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> contains(std::string_view key) override;
  // "coordinator rendezvous at HOST:PORT, namespace job-7/attempt-2/"
  std::string describe() const override;

 private:
  // Runs `call(ctx, timeout_ms)` until it returns something other than UNAVAILABLE or
  // `timeout` is spent. Each try gets a gRPC deadline of its timeout_ms plus a margin, so
  // that the server's own DEADLINE_EXCEEDED (naming the missing keys) arrives first.
  template <typename Call>
  absl::Status call_with_retries(absl::Duration timeout, Call call);

  absl::Status named(const grpc::Status& s) const;

  std::unique_ptr<fp8::v1::RendezvousService::Stub> stub_;
  CoordinatorStoreOptions options_;
};

}  // namespace fp8::train_cli
