// Requests whose bytes do not parse as their message (most often a string field that is
// not UTF-8, which proto3 refuses) fail inside gRPC before any handler or token check
// runs: gRPC answers INTERNAL with no message, and protobuf writes an error line to
// stderr for each, a log-filling lever for anyone who can connect.
//
// Here such a call is answered INVALID_ARGUMENT naming the field protobuf found
// ("request: fp8.v1.JobSpec.name is not valid UTF-8"), and protobuf's parse errors are
// not logged one by one: the count goes out in one line a minute at most.
#pragma once

#include <memory>

#include "grpcpp/support/server_interceptor.h"

namespace fp8::server {

// For ServerBuilder::experimental().SetInterceptorCreators.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_malformed_request_interceptor_factory();

// Installs protobuf's log handler: parse errors of requests are counted and summarised
// in the log at most once a minute; every other protobuf message is logged as it comes.
// Once per process, before serving.
void quiet_request_parse_errors();

}  // namespace fp8::server
