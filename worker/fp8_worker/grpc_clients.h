// gRPC plumbing shared by the session and the log forwarder: the channel to a coordinator
// (TLS when given root certificates, plaintext otherwise), per-call contexts with a
// deadline and a bearer token, and the AppendLogs sender.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/fp8_worker/log_forwarder.h"

namespace fp8::worker {

// ca_file empty: insecure channel. Otherwise TLS with the PEM roots read from it.
absl::StatusOr<std::shared_ptr<grpc::Channel>> make_coordinator_channel(const std::string& address,
                                                                      const std::string& ca_file);

// A context for one call: deadline from now, "authorization: Bearer <token>".
std::unique_ptr<grpc::ClientContext> make_call_context(const std::string& token, std::chrono::milliseconds deadline);

absl::Status to_absl(const grpc::Status& s);

// AppendLogs through a channel per coordinator address (made on first use, then kept).
LogForwarder::Sender make_append_logs_sender(std::string ca_file, std::chrono::milliseconds deadline);

}  // namespace fp8::worker
