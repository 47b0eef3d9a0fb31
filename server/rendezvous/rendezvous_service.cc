#include "server/rendezvous/rendezvous_service.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/request_limits.h"

namespace fp8::server {
namespace {

// absl and gRPC share the canonical status codes, number for number.
grpc::Status to_grpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status validate_timeout_ms(int64_t timeout_ms) {
  if (timeout_ms < 0 || timeout_ms > absl::ToInt64Milliseconds(RendezvousStore::kMaxTimeout)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("timeout_ms: ", timeout_ms, " is outside [0, 600000]"));
  }
  return grpc::Status::OK;
}

// The shorter of timeout_ms and what is left of the call's deadline (an infinite deadline
// is system_clock's max, which the subtraction below handles without overflow).
absl::Duration effective_timeout(const grpc::ServerContext& ctx, int64_t timeout_ms) {
  const auto left = ctx.deadline() - std::chrono::system_clock::now();
  const auto requested = std::chrono::milliseconds(timeout_ms);
  if (left >= requested) return absl::Milliseconds(timeout_ms);
  return std::max(absl::FromChrono(std::chrono::duration_cast<std::chrono::microseconds>(left)),
                  absl::ZeroDuration());
}

}  // namespace

RendezvousServiceImpl::RendezvousServiceImpl(RendezvousStore& store, Authorizer authorize)
    : store_(store), authorize_(std::move(authorize)) {}

grpc::Status RendezvousServiceImpl::admit(grpc::ServerContext& ctx, std::string_view ns) const {
  if (absl::Status s = RendezvousStore::validate_namespace(ns); !s.ok()) return to_grpc(s);
  if (!authorize_) return grpc::Status(grpc::StatusCode::INTERNAL, "rendezvous service has no authorizer");
  return authorize_(ctx, ns);
}

grpc::Status RendezvousServiceImpl::Set(grpc::ServerContext* ctx, const fp8::v1::RendezvousSetRequest* req,
                                        fp8::v1::RendezvousSetResponse*) {
  if (grpc::Status s = admit(*ctx, req->rendezvous_namespace()); !s.ok()) return s;
  if (absl::Status s = rpc::check_request_limits(*req); !s.ok()) return to_grpc(s);
  return to_grpc(store_.set(req->rendezvous_namespace(), req->key(), req->value()));
}

grpc::Status RendezvousServiceImpl::Get(grpc::ServerContext* ctx, const fp8::v1::RendezvousGetRequest* req,
                                        fp8::v1::RendezvousGetResponse* resp) {
  if (grpc::Status s = admit(*ctx, req->rendezvous_namespace()); !s.ok()) return s;
  if (absl::Status s = rpc::check_request_limits(*req); !s.ok()) return to_grpc(s);
  if (grpc::Status s = validate_timeout_ms(req->timeout_ms()); !s.ok()) return s;
  absl::StatusOr<std::string> value =
      store_.get(req->rendezvous_namespace(), req->key(), effective_timeout(*ctx, req->timeout_ms()),
                 [ctx] { return ctx->IsCancelled(); });
  if (!value.ok()) return to_grpc(value.status());
  resp->set_value(std::move(*value));
  return grpc::Status::OK;
}

grpc::Status RendezvousServiceImpl::Wait(grpc::ServerContext* ctx, const fp8::v1::RendezvousWaitRequest* req,
                                         fp8::v1::RendezvousWaitResponse*) {
  if (grpc::Status s = admit(*ctx, req->rendezvous_namespace()); !s.ok()) return s;
  if (absl::Status s = rpc::check_request_limits(*req); !s.ok()) return to_grpc(s);
  if (grpc::Status s = validate_timeout_ms(req->timeout_ms()); !s.ok()) return s;
  const std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  return to_grpc(store_.wait(req->rendezvous_namespace(), keys, effective_timeout(*ctx, req->timeout_ms()),
                            [ctx] { return ctx->IsCancelled(); }));
}

}  // namespace fp8::server
