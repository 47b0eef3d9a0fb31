// The gRPC channel every client of the coordinator uses (fp8-worker, fp8-train, fp8ctl):
// TLS when a CA file is given, plaintext otherwise, and a short reconnect backoff.
//
// Why the reconnect settings matter: by default a channel whose connection broke makes
// its next attempt seconds later (1 s, then 1.6x longer each time up to 2 min, and a new
// name resolution at most every 30 s), failing calls at once meanwhile. A coordinator
// restarted after a few seconds would then find its workers still waiting and declare
// them lost. Here reconnects are tried every 100 ms to 1 s, each attempt still having
// gRPC's default 20 s to complete (coordinator_channel.cc says which settings do what).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace fp8::rpc {

// `flag` names the CA option in errors ("--coordinator-ca").
absl::StatusOr<std::shared_ptr<grpc::Channel>> coordinator_channel(const std::string& address,
                                                                 const std::string& ca_file,
                                                                 const std::string& flag = "--coordinator-ca");

}  // namespace fp8::rpc
