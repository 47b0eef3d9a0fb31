#include "common/metrics/grpc_server_metrics.h"

#include <chrono>
#include <string>

#include <grpcpp/support/interceptor.h>

namespace fp8::metrics {
namespace {

using grpc::experimental::InterceptionHookPoints;

struct GrpcServerFamilies {
  CounterFamily& started;
  CounterFamily& handled;
  HistogramFamily& handling;
};

// The labels every family shares: grpc_type, grpc_service, grpc_method.
struct CallLabels {
  std::string type, service, method;
};

const char* call_type_name(grpc::experimental::ServerRpcInfo::Type type) {
  using Type = grpc::experimental::ServerRpcInfo::Type;
  switch (type) {
    case Type::UNARY: return "unary";
    case Type::CLIENT_STREAMING: return "client_stream";
    case Type::SERVER_STREAMING: return "server_stream";
    case Type::BIDI_STREAMING: return "bidi_stream";
  }
  return "unknown";
}

// "/fp8.v1.JobService/Submit" -> service "fp8.v1.JobService", method "Submit".
CallLabels call_labels(const grpc::experimental::ServerRpcInfo& info) {
  std::string full = info.method();
  if (!full.empty() && full[0] == '/') full.erase(0, 1);
  const size_t slash = full.rfind('/');
  if (slash == std::string::npos) return {call_type_name(info.type()), "unknown", "unknown"};
  return {call_type_name(info.type()), full.substr(0, slash), full.substr(slash + 1)};
}

// One per call: created when the call arrives (counted as started), records once when
// its status is sent.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(const GrpcServerFamilies& families, CallLabels labels)
      : families_(families), labels_(std::move(labels)), start_(Clock::now()) {
    families_.started.with({labels_.type, labels_.service, labels_.method}).inc();
  }

  // A call that never sent a status (the server shut down under it) still counts, as
  // CANCELLED, so that handled_total agrees with the calls that arrived.
  ~MetricsInterceptor() override {
    if (!recorded_) record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void record(grpc::StatusCode code) {
    if (recorded_) return;
    recorded_ = true;
    const std::chrono::duration<double> elapsed = Clock::now() - start_;
    families_.handling.with({labels_.type, labels_.service, labels_.method}).observe(elapsed.count());
    families_.handled.with({labels_.type, labels_.service, labels_.method, status_code_name(code)}).inc();
  }

  const GrpcServerFamilies& families_;
  const CallLabels labels_;
  const Clock::time_point start_;
  bool recorded_ = false;  // hooks of one call run one after another, never concurrently
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(Registry& registry)
      : families_{registry.counter("grpc_server_started_total", "gRPC calls received by the server.",
                                   {"grpc_type", "grpc_service", "grpc_method"}),
                  registry.counter("grpc_server_handled_total",
                                   "gRPC calls finished by the server, by status code.",
                                   {"grpc_type", "grpc_service", "grpc_method", "grpc_code"}),
                  registry.histogram("grpc_server_handling_seconds",
                                     "gRPC call duration on the server, from receipt to status.",
                                     {"grpc_type", "grpc_service", "grpc_method"}, default_latency_buckets())} {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method == nullptr || *method == '\0') return nullptr;  // nothing to label it with
    return new MetricsInterceptor(families_, call_labels(*info));
  }

 private:
  const GrpcServerFamilies families_;
};

}  // namespace

const char* status_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
make_grpc_server_metrics_interceptor_factory(Registry& registry) {
  return std::make_unique<MetricsInterceptorFactory>(registry);
}

}  // namespace fp8::metrics
