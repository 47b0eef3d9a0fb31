#include "worker/fp8_train/amax_resume.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/train/amax_histories.h"

namespace fp8::train_cli {
namespace {

const char* cast_name(fp8::v1::AmaxHistory::Operand operand) {
  switch (operand) {
    case fp8::v1::AmaxHistory::INPUT: return "input";
    case fp8::v1::AmaxHistory::WEIGHT: return "weight";
    case fp8::v1::AmaxHistory::GRAD_OUTPUT: return "grad_output";
    default: return "";
  }
}

}  // namespace

absl::StatusOr<std::string> resume_amax_histories(fp8::v1::TrainerService::StubInterface& stub,
                                                const AmaxResumeRequest& request, engine::LlamaModel& model) {
  bool delayed = false;
  for (const engine::LinearUnit* u : model.linears()) delayed = delayed || u->layer->delayed().count() > 0;
  if (!delayed) return std::string();  // no delayed scaling
  fp8::v1::GetAmaxHistoriesRequest get;
  *get.mutable_caller() = request.caller;
  fp8::v1::GetAmaxHistoriesResponse got;
  grpc::Status s;
  for (int attempt = 0; attempt < 5; ++attempt) {  // the coordinator may be restarting
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + request.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    s = stub.GetAmaxHistories(&ctx, get, &got);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("fetching the job's amax histories from the coordinator: ",
                                               s.error_message()));
  }
  if (got.histories_size() == 0) return std::string("delayed scaling: the coordinator has no amax history yet");
  const bool warm_start = !got.from_job_id().empty();
  if (request.resumed_step != 0 && warm_start) {
    return absl::StrCat("delayed scaling: kept the checkpoint's amax histories (step ", request.resumed_step,
                        ") over those of ", got.from_job_id());
  }
  if (request.resumed_step != 0 && got.step() != request.resumed_step) {
    return absl::StrCat("delayed scaling: kept the checkpoint's amax histories (step ", request.resumed_step,
                        "); the coordinator's are from step ", got.step());
  }
  std::vector<engine::AmaxHistoryRecord> records;
  for (const fp8::v1::AmaxHistory& h : got.histories()) {
    records.push_back(engine::AmaxHistoryRecord{h.layer(), cast_name(h.operand()),
                                                std::vector<float>(h.history().begin(), h.history().end()),
                                                h.scale()});
  }
  absl::StatusOr<int> loaded = engine::load_amax_histories(model, records);
  if (!loaded.ok()) return loaded.status();
  if (warm_start) {
    return absl::StrCat("delayed scaling: started from ", *loaded, " amax histories of ", got.from_job_id(),
                        " (its step ", got.step(), ")");
  }
  return absl::StrCat("delayed scaling: resumed ", *loaded, " amax histories from the coordinator (step ", got.step(),
                      ")");
}

}  // namespace fp8::train_cli
