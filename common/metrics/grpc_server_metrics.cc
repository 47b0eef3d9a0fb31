#include "common/metrics/grpc_server_metrics.h"

#include <chrono>
#include <string>

#include <grpcpp/support/interceptor.h>

namespace fp8::metrics {
namespace {

using grpc::experimental::InterceptionHookPoints;

struct GrpcServerFamilies {
  CounterFamily& requests;
  HistogramFamily& handling;
};

// One per call: created when the call arrives, records once when its status is sent.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(const GrpcServerFamilies& families, std::string method)
      : families_(families), method_(std::move(method)), start_(Clock::now()) {}

  // A call that never sent a status (the server shut down under it) still counts, as
  // CANCELLED, so that requests_total agrees with the calls that arrived.
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
    families_.handling.with({method_}).observe(elapsed.count());
    families_.requests.with({method_, status_code_name(code)}).inc();
  }

  const GrpcServerFamilies& families_;
  const std::string method_;
  const Clock::time_point start_;
  bool recorded_ = false;  // hooks of one call run one after another, never concurrently
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(Registry& registry)
      : families_{registry.counter("fp8_grpc_server_requests_total",
                                   "gRPC calls finished by the server, by method and status code.",
                                   {"method", "code"}),
                  registry.histogram("fp8_grpc_server_handling_seconds",
                                     "gRPC call duration on the server, from receipt to status.",
                                     {"method"}, default_latency_buckets())} {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method == nullptr || *method == '\0') return nullptr;  // nothing to label it with
    std::string name = method[0] == '/' ? method + 1 : method;
    return new MetricsInterceptor(families_, std::move(name));
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
