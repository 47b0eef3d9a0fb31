#include "server/coordinator/malformed_requests.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/rpc/request_limits.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/interceptor.h"

namespace fp8::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// The field of the last parse error protobuf reported on this thread: gRPC's sync server
// parses a request on the thread that then sends its status.
thread_local std::string t_bad_field;

std::atomic<int64_t> g_unlogged{0};
std::mutex g_summary_mu;
std::chrono::steady_clock::time_point g_last_summary{};

// protobuf's message: "String field 'fp8.v1.JobSpec.name' contains invalid UTF-8 data
// when parsing a protocol buffer. ..."
std::string field_of(const std::string& message) {
  const size_t open = message.find('\'');
  const size_t close = open == std::string::npos ? open : message.find('\'', open + 1);
  if (close == std::string::npos) return "";
  return message.substr(open + 1, close - open - 1);
}

void summarise() {
  std::lock_guard<std::mutex> lock(g_summary_mu);
  const auto now = std::chrono::steady_clock::now();
  if (now - g_last_summary < std::chrono::minutes(1)) return;
  g_last_summary = now;
  const int64_t n = g_unlogged.exchange(0);
  log::warn(absl::StrCat(n, " request(s) refused since the last such line: their bytes did not parse "
                         "(a string field not UTF-8, or not the message at all)"));
}

void on_protobuf_log(google::protobuf::LogLevel level, const char* filename, int line, const std::string& message) {
  if (absl::StrContains(message, "invalid UTF-8") && absl::StrContains(message, "parsing")) {
    t_bad_field = field_of(message);
    g_unlogged.fetch_add(1);
    summarise();
    return;
  }
  const log::Level as = level == google::protobuf::LOGLEVEL_INFO      ? log::Level::kInfo
                        : level == google::protobuf::LOGLEVEL_WARNING ? log::Level::kWarning
                                                                       : log::Level::kError;
  log::write(as, absl::StrCat("libprotobuf ", filename, ":", line, ": ", message));
}

class MalformedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      unparsed_ = methods->GetRecvMessage() == nullptr;
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) && unparsed_) {
      const std::string field = std::exchange(t_bad_field, "");
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          field.empty() ? "request: its bytes do not parse as the method's request message"
                        : absl::StrCat("request: ", rpc::quote_for_error(field, 128), " is not valid UTF-8")));
    }
    methods->Proceed();
  }

 private:
  bool unparsed_ = false;  // hooks of one call run one after another
};

class MalformedRequestInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo*) override {
    return new MalformedRequestInterceptor();
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> make_malformed_request_interceptor_factory() {
  return std::make_unique<MalformedRequestInterceptorFactory>();
}

void quiet_request_parse_errors() {
  google::protobuf::SetLogHandler(&on_protobuf_log);
}

}  // namespace fp8::server
