// One place that turns a failed RPC into what the user reads and the exit code scripts
// see, so that every verb words "cannot reach the coordinator" and "token refused" alike.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace fp8::ctl {

// A failure to report: one line (or a few, for spec problems) and the exit code.
struct CliError {
  int exit_code = 1;
  std::string message;
};

// Where the call went and with which token, for messages that say how to fix things.
struct RpcTarget {
  std::string address;
  std::string token_source;  // "--token", "FP8_TOKEN_FILE /x", ...
};

// The exit code for a gRPC status code (exit_codes.h); OK maps to 0.
int exit_code_for_status(grpc::StatusCode code);

// `what` names the call for the message ("submit", "get job job-3").
CliError from_rpc_status(const grpc::Status& status, absl::string_view what, const RpcTarget& target);

// How to get a token, appended to authentication errors.
std::string how_to_get_token();

// Prints each line of the message to stderr prefixed "fp8ctl: " and returns the exit code.
int report(const CliError& error);

}  // namespace fp8::ctl
