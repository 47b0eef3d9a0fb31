#include "common/rpc/coordinator_channel.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace fp8::rpc {

absl::StatusOr<std::shared_ptr<grpc::Channel>> coordinator_channel(const std::string& address,
                                                                 const std::string& ca_file,
                                                                 const std::string& flag) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Once every connection attempt has failed, the channel fails calls at once and makes
  // its next attempt when the name is resolved again, which gRPC allows only every 30 s
  // by default (even for an IP address): a restarted coordinator was reached seconds
  // late, and its workers declared lost.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
  // Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: despite its name it is how long one connection
  // attempt may take (default 20 s). Cut short, a coordinator that answers new connections
  // slowly (restarting on a loaded host) is never reached at all.
  if (ca_file.empty()) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  std::ifstream in(ca_file, std::ios::binary);
  std::ostringstream pem;
  pem << in.rdbuf();
  if (!in || pem.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", ca_file, ": cannot read the CA certificate"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

}  // namespace fp8::rpc
