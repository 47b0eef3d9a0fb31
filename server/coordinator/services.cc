#include "server/coordinator/services.h"

#include "common/rpc/request_limits.h"
#include "common/version/version.h"
#include "server/auth/bearer.h"

namespace fp8::server {
namespace {

// Runs `call` for an authenticated caller whose request keeps within the API's declared
// limits (limits.proto); its StatusOr value goes into *out.
template <typename Call, typename Out>
grpc::Status serve(Coordinator& c, const grpc::ServerContext& ctx, const google::protobuf::Message& request, Out* out,
                   Call&& call) {
  absl::StatusOr<Principal> who = caller(c, ctx);
  if (!who.ok()) return to_grpc(who.status());
  if (absl::Status s = rpc::check_request_limits(request); !s.ok()) return to_grpc(s);
  auto result = call(*who);
  if (!result.ok()) return to_grpc(result.status());
  *out = std::move(*result);
  return grpc::Status::OK;
}

// The same for calls that return only a status.
template <typename Call>
grpc::Status serve_status(Coordinator& c, const grpc::ServerContext& ctx, const google::protobuf::Message& request,
                         Call&& call) {
  absl::StatusOr<Principal> who = caller(c, ctx);
  if (!who.ok()) return to_grpc(who.status());
  if (absl::Status s = rpc::check_request_limits(request); !s.ok()) return to_grpc(s);
  return to_grpc(call(*who));
}

}  // namespace

grpc::Status to_grpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::StatusOr<Principal> caller(Coordinator& coordinator, const grpc::ServerContext& ctx) {
  absl::StatusOr<std::string> token = bearer_token(ctx);
  if (!token.ok()) return token.status();
  return coordinator.authenticate(*token);
}

// ---- JobService -----------------------------------------------------------------------------

grpc::Status JobServiceImpl::Submit(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::Job* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.submit(who, *req); });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.get_job(who, req->job_id()); });
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.list_jobs(who, *req); });
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.cancel_job(who, *req); });
}

grpc::Status JobServiceImpl::ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req, v1::Job* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.resume_job(who, *req); });
}

grpc::Status JobServiceImpl::GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                                        v1::GetJobLogsResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.get_job_logs(who, *req); });
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                                         v1::ListWorkersResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.list_workers(who); });
}

grpc::Status JobServiceImpl::GetJobAmax(grpc::ServerContext* ctx, const v1::GetJobAmaxRequest* req,
                                        v1::GetJobAmaxResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.get_job_amax(who, req->job_id(), req->by_rank()); });
}

grpc::Status JobServiceImpl::GetVersion(grpc::ServerContext* ctx, const v1::GetVersionRequest* req,
                                        v1::GetVersionResponse* out) {
  // Any valid token: which build answers is no secret from a worker either.
  return serve(c_, *ctx, *req, out, [](const Principal&) -> absl::StatusOr<v1::GetVersionResponse> {
    v1::GetVersionResponse version;
    version.set_version(kVersion);
    version.set_protocol(v1::GetVersionResponse::descriptor()->file()->package());
    return version;
  });
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::JobEvent>* writer) {
  absl::StatusOr<Principal> who = caller(c_, *ctx);
  if (!who.ok()) return to_grpc(who.status());
  if (absl::Status s = rpc::check_request_limits(*req); !s.ok()) return to_grpc(s);
  if (req->after_sequence() < 0) return to_grpc(absl::InvalidArgumentError("after_sequence: must be >= 0"));
  int64_t after = req->after_sequence();
  while (!ctx->IsCancelled()) {
    absl::StatusOr<EventBatch> batch = c_.events_after(*who, req->job_id(), after, req->include_progress());
    if (!batch.ok()) return to_grpc(batch.status());
    for (const v1::JobEvent& e : batch->events) {
      if (!writer->Write(e)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      after = e.sequence();
    }
    // Final and nothing left to send: the final state change was the last event.
    if (batch->job_final && batch->events.empty()) return grpc::Status::OK;
    if (batch->events.empty()) c_.await_events(absl::Milliseconds(500));
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
}

// ---- WorkerService --------------------------------------------------------------------------

grpc::Status WorkerServiceImpl::RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                                               v1::RegisterWorkerResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.register_worker(who, *req); });
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.heartbeat(who, *req); });
}

grpc::Status WorkerServiceImpl::ReportRankExit(grpc::ServerContext* ctx, const v1::ReportRankExitRequest* req,
                                               v1::ReportRankExitResponse*) {
  return serve_status(c_, *ctx, *req, [&](const Principal& who) { return c_.report_rank_exit(who, *req); });
}

// ---- TrainerService -------------------------------------------------------------------------

grpc::Status TrainerServiceImpl::ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                                                v1::ReportProgressResponse*) {
  return serve_status(c_, *ctx, *req, [&](const Principal& who) { return c_.report_progress(who, *req); });
}

grpc::Status TrainerServiceImpl::ReportAmaxHistories(grpc::ServerContext* ctx,
                                                     const v1::ReportAmaxHistoriesRequest* req,
                                                     v1::ReportAmaxHistoriesResponse*) {
  return serve_status(c_, *ctx, *req, [&](const Principal& who) { return c_.report_amax_histories(who, *req); });
}

grpc::Status TrainerServiceImpl::GetAmaxHistories(grpc::ServerContext* ctx, const v1::GetAmaxHistoriesRequest* req,
                                                  v1::GetAmaxHistoriesResponse* out) {
  return serve(c_, *ctx, *req, out, [&](const Principal& who) { return c_.get_amax_histories(who, *req); });
}

grpc::Status TrainerServiceImpl::CommitCheckpoint(grpc::ServerContext* ctx, const v1::CommitCheckpointRequest* req,
                                                  v1::CommitCheckpointResponse*) {
  return serve_status(c_, *ctx, *req, [&](const Principal& who) { return c_.commit_checkpoint(who, *req); });
}

grpc::Status TrainerServiceImpl::AppendLogs(grpc::ServerContext* ctx, const v1::AppendLogsRequest* req,
                                            v1::AppendLogsResponse*) {
  return serve_status(c_, *ctx, *req, [&](const Principal& who) { return c_.append_logs(who, *req); });
}

grpc::Status TrainerServiceImpl::ReportCastNumerics(grpc::ServerContext* ctx,
                                                    const v1::ReportCastNumericsRequest* req,
                                                    v1::ReportCastNumericsResponse*) {
  return serve_status(c_, *ctx, *req, [&](const Principal& who) { return c_.report_cast_numerics(who, *req); });
}

}  // namespace fp8::server
