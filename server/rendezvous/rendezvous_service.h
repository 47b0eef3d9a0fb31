// RendezvousService (proto/fp8/v1/rendezvous_service.proto) over a RendezvousStore.
//
// Every call is validated (INVALID_ARGUMENT naming the field), then authorized by the
// coordinator's authorizer for the call's namespace (the trainer token of an attempt may
// use only that attempt's namespace), then served by the store. A blocking call waits for
// the shorter of timeout_ms and the call's gRPC deadline, and stops early when its client
// cancels.
#pragma once

#include <functional>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "fp8/v1/rendezvous_service.grpc.pb.h"
#include "server/rendezvous/rendezvous_store.h"

namespace fp8::server {

class RendezvousServiceImpl final : public fp8::v1::RendezvousService::Service {
 public:
  // OK to let the call use `rendezvous_namespace`; otherwise the status the call answers
  // (PERMISSION_DENIED, UNAUTHENTICATED). Called on gRPC's threads, concurrently.
  using Authorizer = std::function<grpc::Status(grpc::ServerContext& ctx, std::string_view rendezvous_namespace)>;

  // `store` must outlive the service.
  RendezvousServiceImpl(RendezvousStore& store, Authorizer authorize);

  grpc::Status Set(grpc::ServerContext* ctx, const fp8::v1::RendezvousSetRequest* req,
                   fp8::v1::RendezvousSetResponse* resp) override;
  grpc::Status Get(grpc::ServerContext* ctx, const fp8::v1::RendezvousGetRequest* req,
                   fp8::v1::RendezvousGetResponse* resp) override;
  grpc::Status Wait(grpc::ServerContext* ctx, const fp8::v1::RendezvousWaitRequest* req,
                    fp8::v1::RendezvousWaitResponse* resp) override;

 private:
  // Namespace validation, then the authorizer.
  grpc::Status admit(grpc::ServerContext& ctx, std::string_view ns) const;

  RendezvousStore& store_;
  Authorizer authorize_;
};

}  // namespace fp8::server
