// gRPC server metrics (deploy/METRICS.md), recorded by a server interceptor, named and
// labelled as the Go and Java gRPC Prometheus interceptors name theirs, so that community
// gRPC dashboards read them as they are:
//   grpc_server_started_total{grpc_type, grpc_service, grpc_method}             calls received
//   grpc_server_handled_total{grpc_type, grpc_service, grpc_method, grpc_code}  calls finished
//   grpc_server_handling_seconds{grpc_type, grpc_service, grpc_method}          arrival to status
// grpc_type is unary, client_stream, server_stream or bidi_stream; grpc_service the full
// service name ("fp8.v1.JobService") and grpc_method the method ("Submit"); grpc_code the
// canonical name of the status code ("OK", "INVALID_ARGUMENT", ...). Calls to methods the
// server does not serve get grpc_service and grpc_method "unknown" (gRPC's own name for
// them), so clients cannot create series by inventing method names. A server-streaming
// call is timed until its final status, however long it streamed.
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

// Declares the three families in `registry` and returns the factory of interceptors that
// record into them.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
make_grpc_server_metrics_interceptor_factory(Registry& registry);

// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "UNKNOWN" for a value outside the enum.
const char* status_code_name(grpc::StatusCode code);

}  // namespace fp8::metrics
