// The bearer token of a gRPC request: metadata "authorization: Bearer <token>".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace fp8::server {

// UNAUTHENTICATED (as an absl status) when the header is missing or malformed.
absl::StatusOr<std::string> bearer_token(const grpc::ServerContext& ctx);

}  // namespace fp8::server
