// A connection to the coordinator's JobService for one fp8ctl run: the channel, the token
// on every call, the 10 s deadline on every unary call, and errors worded with the
// address and token source.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "client/fp8ctl/client_config.h"
#include "client/fp8ctl/rpc_errors.h"
#include "fp8/v1/job_service.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace fp8::ctl {

inline constexpr std::chrono::seconds kRpcDeadline{10};

class Session {
 public:
  explicit Session(ClientConfig config) : config_(std::move(config)) {}

  // Resolves the token and opens the channel; an error says what to fix (exit 5 for no
  // token, 2 for a bad --coordinator-ca or token file).
  std::optional<CliError> connect();

  v1::JobService::Stub& stub() { return *stub_; }
  const ClientConfig& config() const { return config_; }

  // A context carrying the token; with a deadline of kRpcDeadline unless `stream`.
  std::unique_ptr<grpc::ClientContext> context(bool stream = false) const;

  CliError error(const grpc::Status& status, absl::string_view what) const;

 private:
  ClientConfig config_;
  std::string token_;
  std::string token_source_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace fp8::ctl
