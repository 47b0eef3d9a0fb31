#include "worker/fp8_train/coordinator_reporter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log/log.h"

namespace fp8::train_cli {
namespace {

// Byte counts arrive as doubles (means); the proto carries whole bytes.
int64_t round64(double v) {
  if (!std::isfinite(v) || v <= 0) return 0;
  if (v >= static_cast<double>(std::numeric_limits<int64_t>::max())) return std::numeric_limits<int64_t>::max();
  return std::llround(v);
}

int32_t round32(double v) {
  return static_cast<int32_t>(std::min<int64_t>(round64(v), std::numeric_limits<int32_t>::max()));
}

bool ends_the_attempt(grpc::StatusCode code) {
  return code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::PERMISSION_DENIED ||
         code == grpc::StatusCode::UNAUTHENTICATED;
}

// DEADLINE_EXCEEDED here is our own call deadline: the coordinator is slow or away, which
// is an outage as much as UNAVAILABLE is.
bool transient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// The API's operand for a cast name of Float8Linear::DelayedCasts::names().
std::optional<fp8::v1::AmaxHistory::Operand> amax_operand(const std::string& cast) {
  if (cast == "input") return fp8::v1::AmaxHistory::INPUT;
  if (cast == "weight") return fp8::v1::AmaxHistory::WEIGHT;
  if (cast == "grad_output") return fp8::v1::AmaxHistory::GRAD_OUTPUT;
  return std::nullopt;
}

}  // namespace

CoordinatorReporter::CoordinatorReporter(std::shared_ptr<grpc::Channel> channel, CoordinatorReporterOptions options,
                                         engine::TrainObserver& inner, std::atomic<bool>* stop)
    : stub_(fp8::v1::TrainerService::NewStub(std::move(channel))),
      options_(std::move(options)),
      inner_(inner),
      stop_(stop) {
  thread_ = std::thread([this] { run(); });
}

CoordinatorReporter::~CoordinatorReporter() {
  const bool flushed = drain();
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (!flushed) {
      // Whatever is still queued or retrying would outlive the bounded wait: give it up.
      abandon_ = true;
      queue_.clear();
      if (in_flight_ != nullptr) in_flight_->TryCancel();
    }
  }
  thread_.join();
}

fp8::v1::RankRef CoordinatorReporter::caller() const {
  fp8::v1::RankRef ref;
  ref.set_job_id(options_.job_id);
  ref.set_attempt(options_.attempt);
  ref.set_rank(options_.rank);
  return ref;
}

void CoordinatorReporter::on_start(const engine::TrainStart& s) {
  last_reported_step_ = s.first_step - 1;
  engine::TrainStart shown = s;
  if (shown.resumed_from) shown.resumed_from = logical(shown.resumed_from->string());
  inner_.on_start(shown);
}

void CoordinatorReporter::on_step(const engine::StepReport& r) {
  inner_.on_step(r);
  fp8::v1::ReportProgressRequest req;
  *req.mutable_caller() = caller();
  fp8::v1::TrainingProgress* p = req.mutable_progress();
  p->set_step(r.step);
  p->set_window_steps(static_cast<int32_t>(
      std::clamp<int64_t>(r.step - last_reported_step_, 1, std::numeric_limits<int32_t>::max())));
  last_reported_step_ = r.step;
  p->set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  p->set_loss(r.loss);
  if (r.val_loss.has_value()) p->set_val_loss(*r.val_loss);
  p->set_grad_norm(r.grad_norm);
  p->set_lr(r.lr);
  // The engine's rate is the whole job's; the API's is this rank's: the job's over the
  // data-parallel ranks, since tensor-parallel ranks train one batch together.
  const int tensor = std::max(1, options_.tensor_parallel);
  const int data_parallel = std::max(1, options_.world_size / tensor);
  p->set_tokens_per_second(r.tokens_per_second / data_parallel);
  if (options_.flops_per_token > 0 && options_.peak_flops_per_second > 0) {
    // The tensor-parallel ranks do a token's model FLOPs together, each holding 1/tensor of
    // every block, so each is credited 1/tensor of them. The output projection, whole on
    // every rank, runs on each but counts once: MFU counts the model's work, not the
    // hardware's.
    p->set_mfu(p->tokens_per_second() * options_.flops_per_token / tensor / options_.peak_flops_per_second);
  }
  p->mutable_step_time()->set_step_ms(r.step_ms);
  // Computation is the step less its waits: for data, and for communication that
  // computation did not hide, which on the tensor-parallel axis is all of it.
  const double tensor_ms = r.comm.has_value() ? r.comm->tensor_ms : 0.0;
  const double exposed_ms = r.comm.has_value() ? r.comm->exposed_ms + tensor_ms : 0.0;
  p->mutable_step_time()->set_compute_ms(std::max(0.0, r.step_ms - r.data_ms - exposed_ms));
  if (r.comm.has_value()) {
    p->mutable_step_time()->set_exposed_comm_ms(exposed_ms);
    p->mutable_step_time()->set_tensor_comm_ms(tensor_ms);
    fp8::v1::CommunicationBytes* c = p->mutable_communication();
    c->set_all_gather_fp8_bytes(round64(r.comm->all_gather_fp8_bytes));
    c->set_all_gather_fp32_bytes(round64(r.comm->all_gather_f32_bytes));
    c->set_all_gather_bf16_bytes(round64(r.comm->all_gather_bf16_bytes));
    c->set_reduce_scatter_bytes(round64(r.comm->reduce_scatter_f32_bytes));
    c->set_reduce_scatter_bf16_bytes(round64(r.comm->reduce_scatter_bf16_bytes));
    c->set_all_reduces(round32(r.comm->all_reduces));
    c->set_all_reduce_bytes(round64(r.comm->all_reduce_bytes));
    c->set_tensor_all_reduces(round32(r.comm->tensor_all_reduces));
    c->set_tensor_all_reduce_bytes(round64(r.comm->tensor_all_reduce_bytes));
  }
  p->mutable_memory()->set_peak_bytes(r.peak_memory_bytes);
  p->mutable_memory()->set_reserved_bytes(r.reserved_memory_bytes);
  req.set_resumed_from_step(resumed_from_step_);
  enqueue(std::move(req));
}

std::string CoordinatorReporter::logical(const std::string& text) const {
  if (options_.checkpoint_alias.empty()) return text;
  return absl::StrReplaceAll(text, {{options_.checkpoint_alias, options_.checkpoint_dir}});
}

void CoordinatorReporter::on_checkpoint(int64_t step, const std::filesystem::path& written) {
  const std::filesystem::path dir = logical(written.string());
  inner_.on_checkpoint(step, dir);
  if (options_.rank != 0) return;  // the commit is rank 0's (trainer_service.proto)
  fp8::v1::CommitCheckpointRequest req;
  *req.mutable_caller() = caller();
  req.set_step(step);
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(dir, ec);
  req.set_dir(ec ? dir.string() : absolute.lexically_normal().string());
  req.set_world_size(options_.world_size);
  enqueue(std::move(req));
}

void CoordinatorReporter::on_amax_histories(int64_t step, const std::vector<engine::AmaxHistoryRecord>& histories) {
  inner_.on_amax_histories(step, histories);
  if (options_.rank != 0) return;  // every rank holds the same (all-reduced) histories
  fp8::v1::ReportAmaxHistoriesRequest req;
  *req.mutable_caller() = caller();
  req.set_step(step);
  for (const engine::AmaxHistoryRecord& r : histories) {
    // A tensor cast to two formats ("grad_output.e5m2") has no single operand in the API.
    const std::optional<fp8::v1::AmaxHistory::Operand> operand = amax_operand(r.cast);
    if (!operand.has_value() || r.history.empty() || r.scale <= 0) continue;
    fp8::v1::AmaxHistory* h = req.add_histories();
    h->set_layer(r.layer);
    h->set_operand(*operand);
    h->mutable_history()->Assign(r.history.begin(), r.history.end());
    h->set_scale(r.scale);
    h->set_range_use(r.range_use);
  }
  if (req.histories_size() > 0) enqueue(std::move(req));
}

void CoordinatorReporter::on_cast_numerics(int64_t step, const std::vector<engine::CastNumericsRecord>& casts) {
  inner_.on_cast_numerics(step, casts);
  // Every rank: the metrics are rank 0's view, the by-rank amax comparison needs them all.
  fp8::v1::ReportCastNumericsRequest req;
  *req.mutable_caller() = caller();
  req.set_step(step);
  for (const engine::CastNumericsRecord& r : casts) {
    const std::optional<fp8::v1::AmaxHistory::Operand> operand = amax_operand(r.tensor);
    if (!operand.has_value()) continue;
    fp8::v1::CastNumerics* c = req.add_casts();
    c->set_layer(r.layer);
    c->set_operand(*operand);
    c->set_amax(r.amax);
    c->set_scale(r.scale);
    c->set_range_use(r.range_use);
    c->set_saturated_ratio(r.saturated_ratio);
    c->set_underflow_ratio(r.underflow_ratio);
  }
  if (req.casts_size() > 0) enqueue(std::move(req));
}

void CoordinatorReporter::on_warning(const std::string& w) { inner_.on_warning(logical(w)); }

void CoordinatorReporter::on_finish(const engine::TrainSummary& s) {
  engine::TrainSummary shown = s;
  if (shown.last_checkpoint) shown.last_checkpoint = logical(shown.last_checkpoint->string());
  inner_.on_finish(shown);
  drain();
}

void CoordinatorReporter::enqueue(Message m) {
  if (ended_.load()) return;
  absl::MutexLock lock(&mu_);
  if (closing_) return;
  if (queue_.size() >= options_.queue_limit) {
    auto oldest = std::find_if(queue_.begin(), queue_.end(), [](const Message& q) {
      return !std::holds_alternative<fp8::v1::CommitCheckpointRequest>(q);
    });
    // Only commits queued: keep them all (they are rare, and the coordinator resumes from them).
    if (oldest != queue_.end()) queue_.erase(oldest);
  }
  queue_.push_back(std::move(m));
}

bool CoordinatorReporter::flush(absl::Duration limit) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](CoordinatorReporter* self) { return self->queue_.empty() && !self->busy_; },
                                  this),
                              limit);
}

bool CoordinatorReporter::drain() {
  // One deadline for on_finish and the destructor together: the process waits at most
  // flush_limit for the coordinator, not twice that.
  if (drain_deadline_ == absl::InfiniteFuture()) drain_deadline_ = absl::Now() + options_.flush_limit;
  return flush(std::max(drain_deadline_ - absl::Now(), absl::ZeroDuration()));
}

void CoordinatorReporter::run() {
  while (true) {
    Message m;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CoordinatorReporter* self) { return !self->queue_.empty() || self->closing_; }, this));
      if (queue_.empty()) return;  // closing, and nothing left to send
      m = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    send(m);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

grpc::Status CoordinatorReporter::call_once(const Message& m) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + options_.token);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_deadline));
  {
    absl::MutexLock lock(&mu_);
    if (abandon_) return grpc::Status(grpc::StatusCode::CANCELLED, "the reporter gave up at exit");
    in_flight_ = &ctx;
  }
  grpc::Status s;
  if (const auto* progress = std::get_if<fp8::v1::ReportProgressRequest>(&m)) {
    fp8::v1::ReportProgressResponse resp;
    s = stub_->ReportProgress(&ctx, *progress, &resp);
  } else if (const auto* amax = std::get_if<fp8::v1::ReportAmaxHistoriesRequest>(&m)) {
    fp8::v1::ReportAmaxHistoriesResponse resp;
    s = stub_->ReportAmaxHistories(&ctx, *amax, &resp);
  } else if (const auto* numerics = std::get_if<fp8::v1::ReportCastNumericsRequest>(&m)) {
    fp8::v1::ReportCastNumericsResponse resp;
    s = stub_->ReportCastNumerics(&ctx, *numerics, &resp);
  } else {
    fp8::v1::CommitCheckpointResponse resp;
    s = stub_->CommitCheckpoint(&ctx, std::get<fp8::v1::CommitCheckpointRequest>(m), &resp);
  }
  absl::MutexLock lock(&mu_);
  in_flight_ = nullptr;
  return s;
}

void CoordinatorReporter::send(const Message& m) {
  const bool commit = std::holds_alternative<fp8::v1::CommitCheckpointRequest>(m);
  const std::string what = commit ? absl::StrCat("checkpoint commit of step ",
                                                 std::get<fp8::v1::CommitCheckpointRequest>(m).step())
                                  : std::holds_alternative<fp8::v1::ReportAmaxHistoriesRequest>(m) ? "amax history report"
                                  : std::holds_alternative<fp8::v1::ReportCastNumericsRequest>(m)  ? "cast numerics report"
                                                                                                   : "progress report";
  absl::Duration backoff = options_.first_backoff;
  for (;;) {
    if (ended_.load()) return;
    const grpc::Status s = call_once(m);
    if (s.ok()) {
      outage_warned_ = false;
      return;
    }
    if (ends_the_attempt(s.error_code())) {
      if (!ended_.exchange(true)) {
        log::error(absl::StrCat("coordinator at ", options_.address, " refused a ", what, ": ", s.error_message()));
      }
      if (stop_ != nullptr) stop_->store(true);
      absl::MutexLock lock(&mu_);
      queue_.clear();
      return;
    }
    if (transient(s.error_code())) {
      // The coordinator is away (restarting, say): hold this report and those queued
      // behind it, in order, until it answers; the queue's bound drops the oldest
      // progress if the outage outlasts it, and the flush at exit gives up on the rest.
      if (!outage_warned_) {
        warn(absl::StrCat("coordinator at ", options_.address, " is unreachable (", s.error_message(),
                          "): holding reports (at most ", options_.queue_limit, ") until it answers again"));
        outage_warned_ = true;
      }
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&abandon_), backoff)) return;  // gave up at exit
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    warn(absl::StrCat("coordinator at ", options_.address, " rejected a ", what, ": ", s.error_message()));
    return;
  }
}

void CoordinatorReporter::warn(const std::string& text) {
  log::warn(text);
}

}  // namespace fp8::train_cli
