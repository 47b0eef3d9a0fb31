#include "common/rpc/coordinator_channel.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace fp8::rpc {

absl::StatusOr<std::shared_ptr<grpc::Channel>> CoordinatorChannel(const std::string& address,
                                                                 const std::string& ca_file,
                                                                 const std::string& flag) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
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
