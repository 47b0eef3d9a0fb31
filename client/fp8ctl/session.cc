#include "client/fp8ctl/session.h"

#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "common/rpc/coordinator_channel.h"

namespace fp8::ctl {

std::optional<CliError> Session::connect() {
  if (!config_.token.ok()) {
    const bool missing = absl::IsNotFound(config_.token.status());
    return CliError{missing ? kExitAuth : kExitUsage, std::string(config_.token.status().message())};
  }
  token_ = config_.token->token;
  token_source_ = config_.token->source;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::coordinator_channel(config_.coordinator, config_.coordinator_ca, "--coordinator-ca");
  if (!channel.ok()) return CliError{kExitUsage, std::string(channel.status().message())};
  stub_ = v1::JobService::NewStub(*channel);
  return std::nullopt;
}

std::unique_ptr<grpc::ClientContext> Session::context(bool stream) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  if (!stream) ctx->set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
  return ctx;
}

CliError Session::error(const grpc::Status& status, absl::string_view what) const {
  return from_rpc_status(status, what, RpcTarget{config_.coordinator, token_source_});
}

}  // namespace fp8::ctl
