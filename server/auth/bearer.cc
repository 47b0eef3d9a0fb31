#include "server/auth/bearer.h"

#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace fp8::server {

absl::StatusOr<std::string> bearer_token(const grpc::ServerContext& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("no 'authorization: Bearer <token>' metadata in the request");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") && !absl::ConsumePrefix(&value, "bearer ")) {
    return absl::UnauthenticatedError("the authorization metadata is not 'Bearer <token>'");
  }
  value = absl::StripAsciiWhitespace(value);
  if (value.empty() || value.size() > 512) return absl::UnauthenticatedError("malformed bearer token");
  return std::string(value);
}

}  // namespace fp8::server
