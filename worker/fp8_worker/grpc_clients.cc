#include "worker/fp8_worker/grpc_clients.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/rpc/coordinator_channel.h"
#include "fp8/v1/trainer_service.grpc.pb.h"

namespace fp8::worker {

absl::StatusOr<std::shared_ptr<grpc::Channel>> make_coordinator_channel(const std::string& address,
                                                                      const std::string& ca_file) {
  return rpc::coordinator_channel(address, ca_file);
}

std::unique_ptr<grpc::ClientContext> make_call_context(const std::string& token, std::chrono::milliseconds deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

absl::Status to_absl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

LogForwarder::Sender make_append_logs_sender(std::string ca_file, std::chrono::milliseconds deadline) {
  struct Stubs {
    std::mutex mu;
    std::map<std::string, std::unique_ptr<v1::TrainerService::Stub>> by_address;
  };
  auto stubs = std::make_shared<Stubs>();
  return [stubs, ca_file = std::move(ca_file), deadline](const std::string& address, const std::string& token,
                                                         const v1::AppendLogsRequest& request) -> absl::Status {
    v1::TrainerService::Stub* stub = nullptr;
    {
      std::lock_guard<std::mutex> lock(stubs->mu);
      std::unique_ptr<v1::TrainerService::Stub>& s = stubs->by_address[address];
      if (!s) {
        absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = make_coordinator_channel(address, ca_file);
        if (!ch.ok()) return ch.status();
        s = v1::TrainerService::NewStub(*ch);
      }
      stub = s.get();
    }
    std::unique_ptr<grpc::ClientContext> ctx = make_call_context(token, deadline);
    v1::AppendLogsResponse response;
    return to_absl(stub->AppendLogs(ctx.get(), request, &response));
  };
}

}  // namespace fp8::worker
