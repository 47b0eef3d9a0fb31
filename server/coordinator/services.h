// The coordinator's gRPC services: each call authenticates its bearer token, hands the
// request to the Coordinator and turns its absl::Status into a gRPC status. No state
// lives here.
#pragma once

#include "fp8/v1/job_service.grpc.pb.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "fp8/v1/worker_service.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace fp8::server {

grpc::Status to_grpc(const absl::Status& status);
// The caller of a request (UNAUTHENTICATED without a known token).
absl::StatusOr<Principal> caller(Coordinator& coordinator, const grpc::ServerContext& ctx);

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(Coordinator& c) : c_(c) {}
  grpc::Status Submit(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::Job* out) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* out) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* out) override;
  grpc::Status ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req, v1::Job* out) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                          v1::GetJobLogsResponse* out) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* out) override;
  grpc::Status GetJobAmax(grpc::ServerContext* ctx, const v1::GetJobAmaxRequest* req,
                          v1::GetJobAmaxResponse* out) override;
  grpc::Status GetVersion(grpc::ServerContext* ctx, const v1::GetVersionRequest* req,
                          v1::GetVersionResponse* out) override;

 private:
  Coordinator& c_;
};

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  explicit WorkerServiceImpl(Coordinator& c) : c_(c) {}
  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* out) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* out) override;
  grpc::Status ReportRankExit(grpc::ServerContext* ctx, const v1::ReportRankExitRequest* req,
                              v1::ReportRankExitResponse* out) override;

 private:
  Coordinator& c_;
};

class TrainerServiceImpl final : public v1::TrainerService::Service {
 public:
  explicit TrainerServiceImpl(Coordinator& c) : c_(c) {}
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse* out) override;
  grpc::Status ReportAmaxHistories(grpc::ServerContext* ctx, const v1::ReportAmaxHistoriesRequest* req,
                                   v1::ReportAmaxHistoriesResponse* out) override;
  grpc::Status GetAmaxHistories(grpc::ServerContext* ctx, const v1::GetAmaxHistoriesRequest* req,
                                v1::GetAmaxHistoriesResponse* out) override;
  grpc::Status CommitCheckpoint(grpc::ServerContext* ctx, const v1::CommitCheckpointRequest* req,
                                v1::CommitCheckpointResponse* out) override;
  grpc::Status AppendLogs(grpc::ServerContext* ctx, const v1::AppendLogsRequest* req,
                          v1::AppendLogsResponse* out) override;
  grpc::Status ReportCastNumerics(grpc::ServerContext* ctx, const v1::ReportCastNumericsRequest* req,
                                  v1::ReportCastNumericsResponse* out) override;

 private:
  Coordinator& c_;
};

}  // namespace fp8::server
