// fp8-train's reports to the coordinator (TrainerService, proto/fp8/v1/trainer_service.proto)
// for a rank the worker daemon started: a TrainObserver that passes every event on to the
// rank's own observer (rank 0's console log stays as it is) and forwards step reports
// (ReportProgress), every cast's numerics (ReportCastNumerics) and, on rank 0, checkpoint
// commits (CommitCheckpoint) and delayed scaling's amax histories (ReportAmaxHistories).
//
// Off the critical path: calls go out on a background thread from a bounded queue, so a
// slow or absent coordinator never stalls a step. When the queue is full the oldest
// progress or amax report is dropped; a checkpoint commit is never dropped for room. Each call has
// a deadline; while the coordinator does not answer (UNAVAILABLE, the deadline), the
// message is retried with backoff and the later ones wait behind it, so that what the
// rank reported during an outage reaches the coordinator, in order, when it is back (one
// warning per outage).
//
// FAILED_PRECONDITION (the attempt ended), PERMISSION_DENIED or UNAUTHENTICATED (the token
// is not, or no longer, good for this attempt) stop all sending and raise attempt_ended();
// the reporter also sets the `stop` flag it was given, which fp8-train hands the training
// loop as RunControl::stop, so the rank stops after the step in flight.
//
// on_finish() and the destructor flush the queue, waiting at most `flush_limit`, so that
// the final report and the last commit reach the coordinator before the process exits.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <variant>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "worker/engine/train/train_observer.h"

namespace fp8::train_cli {

struct CoordinatorReporterOptions {
  std::string address;  // host:port, for messages
  std::string token;    // the attempt's trainer token
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int world_size = 1;
  // parallel.tensor: world_size / tensor_parallel data-parallel ranks each train their own
  // batch; the tensor-parallel ranks among them share one.
  int tensor_parallel = 1;
  size_t queue_limit = 256;
  absl::Duration call_deadline = absl::Seconds(5);
  // Retries of a call the coordinator did not answer (UNAVAILABLE, deadline): from
  // first_backoff, doubling up to max_backoff, for as long as the process runs.
  absl::Duration first_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(2);
  // The checkpoint folder as the job named it, and the path the rank writes it through
  // (confined_paths.h); reports and messages show the first. Empty: the same.
  std::string checkpoint_dir;
  std::string checkpoint_alias;
  absl::Duration flush_limit = absl::Seconds(10);
  // The model's training FLOPs per token (jobspec::training_flops_per_token) and this
  // rank's device peak (device_peak.h); with both, each report carries the rank's MFU
  // (of its 1/tensor_parallel share of the model).
  double flops_per_token = 0;
  double peak_flops_per_second = 0;
};

class CoordinatorReporter final : public engine::TrainObserver {
 public:
  // `inner` (the console or quiet observer) must outlive this; so must `stop`, which may be
  // null. Messages (warnings, the end of the attempt) go to the log (common/log/log.h).
  CoordinatorReporter(std::shared_ptr<grpc::Channel> channel, CoordinatorReporterOptions options,
                      engine::TrainObserver& inner, std::atomic<bool>* stop);
  ~CoordinatorReporter() override;  // flushes (bounded), then stops the thread
  CoordinatorReporter(const CoordinatorReporter&) = delete;
  CoordinatorReporter& operator=(const CoordinatorReporter&) = delete;

  void on_start(const engine::TrainStart& s) override;
  void on_step(const engine::StepReport& r) override;
  void on_checkpoint(int64_t step, const std::filesystem::path& dir) override;
  void on_amax_histories(int64_t step, const std::vector<engine::AmaxHistoryRecord>& histories) override;
  void on_cast_numerics(int64_t step, const std::vector<engine::CastNumericsRecord>& casts) override;
  void on_warning(const std::string& w) override;
  void on_finish(const engine::TrainSummary& s) override;

  // The committed step this attempt resumed from (0: from scratch), sent with every
  // progress report. Call before the first step.
  void set_resumed_from_step(int64_t step) { resumed_from_step_ = step; }

  // True once the coordinator said this attempt ended (or refused the token).
  bool attempt_ended() const { return ended_.load(); }
  // Waits until every queued message was sent or dropped, at most `limit`. False on timeout.
  bool flush(absl::Duration limit);

 private:
  using Message = std::variant<fp8::v1::ReportProgressRequest, fp8::v1::CommitCheckpointRequest,
                               fp8::v1::ReportAmaxHistoriesRequest, fp8::v1::ReportCastNumericsRequest>;

  void enqueue(Message m);
  // flush() against one deadline shared by on_finish and the destructor.
  bool drain();
  void run();  // the sending thread
  // Sends one message, retrying transient failures; raises ended_ when the coordinator
  // says the attempt is over.
  void send(const Message& m);
  grpc::Status call_once(const Message& m);
  void warn(const std::string& text);
  fp8::v1::RankRef caller() const;
  // `text` with the checkpoint folder's alias put back to its name (options_).
  std::string logical(const std::string& text) const;

  std::unique_ptr<fp8::v1::TrainerService::Stub> stub_;
  const CoordinatorReporterOptions options_;
  engine::TrainObserver& inner_;
  std::atomic<bool>* stop_;
  std::atomic<bool> ended_{false};
  int64_t last_reported_step_ = 0;  // the training thread's only
  int64_t resumed_from_step_ = 0;   // the training thread's only
  absl::Time drain_deadline_ = absl::InfiniteFuture();  // the training thread's only

  absl::Mutex mu_;
  std::deque<Message> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;      // a message is being sent
  bool closing_ ABSL_GUARDED_BY(mu_) = false;   // the destructor runs: drain, then exit
  bool abandon_ ABSL_GUARDED_BY(mu_) = false;   // the flush timed out: stop retrying
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;  // to cancel on abandon
  bool outage_warned_ = false;  // the sending thread's only
  std::thread thread_;
};

}  // namespace fp8::train_cli
