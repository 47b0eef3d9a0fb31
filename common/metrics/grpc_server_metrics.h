// gRPC server metrics (deploy/METRICS.md), recorded by a server interceptor:
//   fp8_grpc_server_requests_total{method, code}   calls finished, by status code name
//   fp8_grpc_server_handling_seconds{method}       from the call's arrival to its status
// `method` is the full method without the leading slash ("fp8.v1.JobService/Submit");
// `code` is the canonical name of the status code ("OK", "INVALID_ARGUMENT", ...). Calls
// to methods the server does not serve are method="unknown" (gRPC's own name for them),
// so clients cannot create series by inventing method names.
// Unary and streaming calls alike: a server-streaming call is timed until its final
// status, however long it streamed.
//
// Wiring it into a server (the registry must outlive the server):
//
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(fp8::metrics::make_grpc_server_metrics_interceptor_factory(registry));
//   grpc::ServerBuilder builder;
//   builder.experimental().SetInterceptorCreators(std::move(f));
//   ... AddListeningPort, RegisterService, BuildAndStart as usual.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include "common/metrics/registry.h"

namespace fp8::metrics {

// Declares both families in `registry` and returns the factory of interceptors that
// record into them.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
make_grpc_server_metrics_interceptor_factory(Registry& registry);

// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "UNKNOWN" for a value outside the enum.
const char* status_code_name(grpc::StatusCode code);

}  // namespace fp8::metrics
