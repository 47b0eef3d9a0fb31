// The gRPC channel every client of the coordinator uses (fp8-worker, fp8-train, fp8ctl):
// TLS when a CA file is given, plaintext otherwise, and a short reconnect backoff.
//
// Why the backoff matters: after a lost connection gRPC waits 1 s, then 1.6x longer each
// time (up to 2 min), before it tries to connect again, failing calls at once meanwhile.
// A coordinator restarted after a few seconds would then find its workers still waiting
// and declare them lost. Here reconnects are tried every 100 ms to 1 s.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace fp8::rpc {

// `flag` names the CA option in errors ("--coordinator-ca").
absl::StatusOr<std::shared_ptr<grpc::Channel>> CoordinatorChannel(const std::string& address,
                                                                 const std::string& ca_file,
                                                                 const std::string& flag = "--coordinator-ca");

}  // namespace fp8::rpc
