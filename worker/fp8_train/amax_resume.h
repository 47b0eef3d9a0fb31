// A restarted attempt's delayed scaling picks up the amax histories the coordinator kept
// for the job (TrainerService.GetAmaxHistories), and a job's first attempt those of the
// job it warm-starts from (fp8.amax_init_from), which the coordinator answers with until
// the job has its own.
//
// Which histories win: the coordinator's are loaded when they were taken at the step
// training resumes from (rank 0 reports them at every checkpoint, so they are that
// checkpoint's own), or when no checkpoint was loaded (training starts over, and its
// scales start from the histories the job had reached instead of from dynamic scaling).
// Histories of another step, or of another job once a checkpoint was loaded, are left
// alone: the checkpoint's state belongs to its weights, and resuming it stays bit-exact.
//
// Every rank calls this and applies the same rule, so their states stay identical; a
// failed call fails the rank (the attempt then restarts) rather than let ranks diverge.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "worker/engine/model/llama.h"

namespace fp8::train_cli {

struct AmaxResumeRequest {
  std::string token;  // the attempt's trainer token
  fp8::v1::RankRef caller;
  int64_t resumed_step = 0;  // 0: no checkpoint was loaded
};

// One line for the log saying what was loaded (or why nothing was).
absl::StatusOr<std::string> resume_amax_histories(fp8::v1::TrainerService::StubInterface& stub,
                                                const AmaxResumeRequest& request, engine::LlamaModel& model);

}  // namespace fp8::train_cli
