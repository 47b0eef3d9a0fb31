// The coordinator's state machine driven directly (no gRPC, no processes): workers and
// trainers are played by the test through the same calls the services make, over a real
// SQLite file. The system tests (tests/system) run the real daemons.
#include "server/coordinator/coordinator.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/server/coordinator/coordinator_fixture.h"

namespace fp8::server {
namespace {

TEST_F(CoordinatorTest, TwoRankJobRunsToSuccess) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(2));
  EXPECT_EQ(get(id).state(), v1::Job::RUNNING);  // placed at once: two free workers
  auto c0 = beat(w0);
  auto c1 = beat(w1);
  ASSERT_EQ(c0.size(), 1u);
  ASSERT_EQ(c1.size(), 1u);
  const v1::StartRank s0 = c0[0].start_rank(), s1 = c1[0].start_rank();
  EXPECT_EQ(s0.rank(), 0);
  EXPECT_EQ(s1.rank(), 1);
  EXPECT_EQ(s0.world_size(), 2);
  EXPECT_EQ(s0.rendezvous_namespace(), id + "/attempt-1/");
  EXPECT_FALSE(s0.trainer_token().empty());
  EXPECT_EQ(s0.spec().owner(), "alice");

  beat(w0, {running_status(s0)});
  beat(w1, {running_status(s1)});
  EXPECT_EQ(get(id).attempt_history(0).state(), v1::Attempt::RUNNING);

  // The trainer token speaks for its attempt only.
  auto trainer = c_->authenticate(s0.trainer_token());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  v1::ReportProgressRequest progress;
  progress.mutable_caller()->set_job_id(id);
  progress.mutable_caller()->set_attempt(1);
  progress.mutable_caller()->set_rank(0);
  progress.mutable_progress()->set_step(10);
  progress.mutable_progress()->set_window_steps(10);
  progress.mutable_progress()->set_loss(2.5);
  progress.mutable_progress()->set_tokens_per_second(1234);
  ASSERT_TRUE(c_->report_progress(*trainer, progress).ok());
  EXPECT_TRUE(c_->authorize_rendezvous(*trainer, id + "/attempt-1/").ok());
  EXPECT_EQ(c_->authorize_rendezvous(*trainer, id + "/attempt-2/").code(), absl::StatusCode::kPermissionDenied);

  ASSERT_TRUE(exit(w0, s0, 0).ok());
  EXPECT_EQ(get(id).state(), v1::Job::RUNNING);
  ASSERT_TRUE(exit(w1, s1, 0).ok());
  const v1::Job done = get(id);
  EXPECT_EQ(done.state(), v1::Job::SUCCEEDED);
  EXPECT_DOUBLE_EQ(done.latest_progress().loss(), 2.5);
  EXPECT_DOUBLE_EQ(done.latest_progress().tokens_per_second(), 1234);
  EXPECT_GT(done.finished_unix_ms(), 0);
  // The attempt's token died with it.
  EXPECT_EQ(c_->authenticate(s0.trainer_token()).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(CoordinatorTest, ListWorkersShowsWhatEachHolds) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(1));
  auto listed = c_->list_workers(alice_);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->workers_size(), 2);
  EXPECT_EQ(listed->workers(0).worker_id(), w0);
  EXPECT_EQ(listed->workers(0).state(), v1::WorkerInfo::BUSY);
  ASSERT_EQ(listed->workers(0).ranks_size(), 1);
  EXPECT_EQ(listed->workers(0).ranks(0).job_id(), id);
  EXPECT_EQ(listed->workers(1).state(), v1::WorkerInfo::IDLE);
  EXPECT_GT(listed->workers(1).last_heartbeat_unix_ms(), 0);
  // Another user sees that w0 is busy, not with whose job.
  auto for_bob = c_->list_workers(bob_);
  ASSERT_TRUE(for_bob.ok());
  EXPECT_EQ(for_bob->workers(0).ranks(0).job_id(), "");
  EXPECT_EQ(c_->list_workers(worker_).status().code(), absl::StatusCode::kPermissionDenied);
  (void)w1;
}

TEST_F(CoordinatorTest, GangWaitsForEnoughWorkers) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(3));
  c_->tick();
  EXPECT_EQ(get(id).state(), v1::Job::QUEUED);
  EXPECT_TRUE(beat(w0).empty());  // nothing held partially
  const std::string w2 = add_worker();
  EXPECT_EQ(get(id).state(), v1::Job::RUNNING);
  EXPECT_EQ(beat(w0).size(), 1u);
  EXPECT_EQ(beat(w1).size(), 1u);
  EXPECT_EQ(beat(w2).size(), 1u);
}

// A queued job says why it waits (describe and list); one that needs more workers than
// are registered holds none back, one that the fleet could hold keeps later jobs behind it.
TEST_F(CoordinatorTest, AQueuedJobSaysWhyItWaits) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string big = submit_as(alice_, make_spec(3, 5));
  const std::string small = submit_as(alice_, make_spec(1, 0));
  c_->tick();
  EXPECT_EQ(get(small).state(), v1::Job::RUNNING) << "a job more workers must join for blocks nothing";
  EXPECT_EQ(get(small).pending_reason(), "");
  EXPECT_EQ(get(big).state(), v1::Job::QUEUED);
  EXPECT_EQ(get(big).pending_reason(), "waiting for 3 cpu workers: 2 registered, 1 free; more must register");

  const std::string w2 = add_worker();  // now the fleet could hold big: it keeps w1 and w2
  const std::string later = submit_as(alice_, make_spec(1, 0));
  c_->tick();
  EXPECT_EQ(get(later).state(), v1::Job::QUEUED);
  EXPECT_EQ(get(later).pending_reason(), absl::StrCat("behind ", big, " (priority 5)"));
  EXPECT_EQ(get(big).pending_reason(), "waiting for 3 cpu workers: 3 registered, 2 free");
  auto listed = c_->list_jobs(alice_, v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  for (const v1::Job& j : listed->jobs()) {
    EXPECT_EQ(j.pending_reason(), get(j.id()).pending_reason()) << j.id();
  }
  (void)w0;
  (void)w1;
  (void)w2;
}

TEST_F(CoordinatorTest, PriorityThenSubmissionOrder) {
  const std::string low = submit_as(alice_, make_spec(1, 0));
  const std::string high = submit_as(alice_, make_spec(1, 5));
  const std::string low2 = submit_as(alice_, make_spec(1, 0));
  const std::string w0 = add_worker();
  EXPECT_EQ(get(high).state(), v1::Job::RUNNING);
  EXPECT_EQ(get(low).state(), v1::Job::QUEUED);
  const std::string w1 = add_worker();
  EXPECT_EQ(get(low).state(), v1::Job::RUNNING);
  EXPECT_EQ(get(low2).state(), v1::Job::QUEUED);
}

TEST_F(CoordinatorTest, FailedRankStopsTheGangAndRestarts) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(2, 0, /*max_restarts=*/1));
  const v1::StartRank s0 = beat(w0)[0].start_rank(), s1 = beat(w1)[0].start_rank();
  beat(w0, {running_status(s0)});
  beat(w1, {running_status(s1)});
  ASSERT_TRUE(exit(w1, s1, 1).ok());  // a failure of unknown class
  v1::Job job = get(id);
  EXPECT_EQ(job.state(), v1::Job::RESTARTING);
  EXPECT_EQ(job.attempt_history(0).state(), v1::Attempt::FAILED);
  EXPECT_EQ(job.attempt_history(0).failure_class(), v1::RestartPolicy::UNKNOWN);
  EXPECT_NE(job.attempt_history(0).end_reason().find("rank 1"), std::string::npos) << job.attempt_history(0).end_reason();
  // Rank 0 is told to stop; its worker stays busy until it has.
  auto stop = beat(w0, {running_status(s0)});
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_TRUE(stop[0].has_stop_rank());
  EXPECT_EQ(stop[0].stop_rank().attempt(), 1);
  c_->tick();
  EXPECT_EQ(get(id).state(), v1::Job::RESTARTING);
  ASSERT_TRUE(exit(w0, s0, 143).ok());  // stopped: an old attempt's exit changes nothing
  // Both free again: attempt 2 starts (backoff 0).
  c_->tick();
  job = get(id);
  EXPECT_EQ(job.state(), v1::Job::RUNNING);
  EXPECT_EQ(job.attempts(), 2);
  EXPECT_EQ(job.restarts_left(), 0);
  const v1::StartRank t0 = beat(w0)[0].start_rank(), t1 = beat(w1)[0].start_rank();
  EXPECT_EQ(t0.attempt(), 2);
  ASSERT_TRUE(exit(w0, t0, 1).ok());
  job = get(id);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_NE(job.failure_reason().find("restarts used"), std::string::npos) << job.failure_reason();
  (void)t1;
}

// A failure that a restart would repeat (fp8-train's exit code 3: the loss diverged) fails
// the job at once, restarts left or not; restarts.on can ask for it to restart anyway.
TEST_F(CoordinatorTest, ADivergenceIsNotRestartedUnlessRestartsOnListsIt) {
  const std::string w0 = add_worker();
  const std::string id = submit_as(alice_, make_spec(1, 0, /*max_restarts=*/3));
  const v1::StartRank s0 = beat(w0)[0].start_rank();
  beat(w0, {running_status(s0)});
  ASSERT_TRUE(exit(w0, s0, 3).ok());
  v1::Job job = get(id);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.attempt_history(0).failure_class(), v1::RestartPolicy::DIVERGENCE);
  EXPECT_NE(job.failure_reason().find("not restarted: a divergence failure, not in restarts.on"), std::string::npos)
      << job.failure_reason();

  v1::JobSpec spec = make_spec(1, 0, 3);
  spec.set_name("diverges-again");
  spec.mutable_restarts()->add_on(v1::RestartPolicy::DIVERGENCE);
  const std::string again = submit_as(alice_, spec);
  const v1::StartRank t0 = beat(w0)[0].start_rank();
  beat(w0, {running_status(t0)});
  ASSERT_TRUE(exit(w0, t0, 3).ok());
  job = get(again);
  EXPECT_EQ(job.attempts(), 2) << "restarted (backoff 0: at once)";
  EXPECT_NE(job.state(), v1::Job::FAILED);
}

// A cancelled job continues from its last committed checkpoint: the same job, a new
// attempt told to resume from that step, on another number of ranks when asked.
TEST_F(CoordinatorTest, ACancelledJobResumesFromItsLastCheckpoint) {
  RunningJob run = start_running(make_spec(1, 0, /*max_restarts=*/2));
  const std::string folder = run.start.spec().checkpoint().dir();
  v1::CommitCheckpointRequest commit;
  commit.mutable_caller()->set_job_id(run.id);
  commit.mutable_caller()->set_attempt(1);
  commit.set_world_size(1);
  commit.set_step(10);
  commit.set_dir(folder + "/step-00000010");
  ASSERT_TRUE(c_->commit_checkpoint(run.trainer, commit).ok());

  v1::ResumeJobRequest resume;
  resume.set_job_id(run.id);
  EXPECT_EQ(c_->resume_job(alice_, resume).status().code(), absl::StatusCode::kFailedPrecondition) << "still running";
  v1::CancelJobRequest cancel;
  cancel.set_job_id(run.id);
  ASSERT_TRUE(c_->cancel_job(alice_, cancel).ok());
  ASSERT_TRUE(exit(run.worker, run.start, 143).ok());
  EXPECT_EQ(c_->resume_job(bob_, resume).status().code(), absl::StatusCode::kNotFound) << "another user's job";
  resume.set_world_size(0);
  EXPECT_EQ(c_->resume_job(alice_, resume).status().code(), absl::StatusCode::kInvalidArgument);

  const std::string second = add_worker();
  resume.set_world_size(2);
  absl::StatusOr<v1::Job> resumed = c_->resume_job(alice_, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->id(), run.id);
  EXPECT_EQ(resumed->spec().resources().world_size(), 2);
  EXPECT_EQ(resumed->restarts_left(), 2);
  EXPECT_TRUE(resumed->failure_reason().empty());
  auto start_of = [](const std::vector<v1::WorkerCommand>& commands) {
    for (const v1::WorkerCommand& c : commands) {
      if (c.has_start_rank()) return c.start_rank();
    }
    return v1::StartRank();
  };
  const v1::StartRank s0 = start_of(beat(run.worker));
  const v1::StartRank s1 = start_of(beat(second));
  EXPECT_EQ(s0.attempt(), 2);
  EXPECT_EQ(s0.resume_step(), 10);
  EXPECT_EQ(s0.world_size(), 2);
  EXPECT_EQ(s1.rank(), 1);
  const v1::Job job = get(run.id);
  EXPECT_EQ(job.state(), v1::Job::RUNNING);
  ASSERT_EQ(job.attempt_history_size(), 2);
  EXPECT_EQ(job.attempt_history(0).state(), v1::Attempt::CANCELLED);
  EXPECT_EQ(job.attempt_history(1).resumed_from_step(), 10);
}

// A tensor-parallel job resumes only on whole tensor-parallel groups: a world size the
// spec does not allow is refused at the call, naming why, not left for the ranks to fail.
TEST_F(CoordinatorTest, ATensorParallelJobResumesOnlyOnWholeTensorParallelGroups) {
  v1::JobSpec spec = make_spec(2);
  spec.mutable_model()->set_ffn_dim(128);
  spec.mutable_parallel()->set_tensor(2);
  const std::string id = submit_as(alice_, spec);  // no workers: it stays queued
  ASSERT_FALSE(id.empty());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  ASSERT_TRUE(c_->cancel_job(alice_, cancel).ok());
  v1::ResumeJobRequest resume;
  resume.set_job_id(id);
  resume.set_world_size(3);
  const absl::Status refused = c_->resume_job(alice_, resume).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("world_size: 3 is not a multiple of parallel.tensor (2)"), std::string::npos)
      << refused;
  EXPECT_EQ(get(id).state(), v1::Job::CANCELLED);
  resume.set_world_size(2);
  absl::StatusOr<v1::Job> resumed = c_->resume_job(alice_, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->state(), v1::Job::QUEUED);
}

TEST_F(CoordinatorTest, LostWorkerEndsTheAttempt) {
  lost_after_ = absl::Milliseconds(300);
  open();
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(2, 0, 1));
  const v1::StartRank s0 = beat(w0)[0].start_rank();
  beat(w1);
  for (int i = 0; i < 10; ++i) {  // w1 goes silent
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    beat(w0, {running_status(s0)});
    c_->tick();
  }
  const v1::Job job = get(id);
  EXPECT_EQ(job.attempt_history(0).state(), v1::Attempt::FAILED);
  EXPECT_NE(job.attempt_history(0).end_reason().find(w1), std::string::npos) << job.attempt_history(0).end_reason();
  EXPECT_EQ(job.state(), v1::Job::RESTARTING);  // one worker left: the gang of 2 waits
  v1::HeartbeatRequest r;
  r.set_worker_id(w1);
  EXPECT_EQ(c_->heartbeat(worker_, r).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, CancelStopsEveryRank) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(2));
  const v1::StartRank s0 = beat(w0)[0].start_rank(), s1 = beat(w1)[0].start_rank();
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  EXPECT_EQ(c_->cancel_job(bob_, cancel).status().code(), absl::StatusCode::kNotFound);  // not bob's
  auto cancelled = c_->cancel_job(alice_, cancel);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::Job::CANCELLED);
  EXPECT_EQ(cancelled->failure_reason(), "cancelled by alice");
  auto c0 = beat(w0, {running_status(s0)});
  auto c1 = beat(w1, {running_status(s1)});
  ASSERT_EQ(c0.size(), 1u);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_TRUE(c0[0].has_stop_rank());
  EXPECT_TRUE(c1[0].has_stop_rank());
  EXPECT_EQ(c_->cancel_job(alice_, cancel)->state(), v1::Job::CANCELLED);  // again: unchanged
}

TEST_F(CoordinatorTest, RolesAndOwnership) {
  const std::string id = submit_as(alice_, make_spec(1));
  EXPECT_EQ(c_->get_job(bob_, id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(c_->get_job(admin_, id).ok());
  EXPECT_EQ(c_->get_job(worker_, id).status().code(), absl::StatusCode::kPermissionDenied);
  v1::SubmitJobRequest as_bob;
  *as_bob.mutable_spec() = make_spec(1);
  as_bob.mutable_spec()->set_owner("bob");
  EXPECT_EQ(c_->submit(alice_, as_bob).status().code(), absl::StatusCode::kPermissionDenied);
  v1::RegisterWorkerRequest reg;
  reg.set_device_kind(v1::ResourceSpec::CPU);
  reg.set_device_name("cpu");
  EXPECT_EQ(c_->register_worker(alice_, reg).status().code(), absl::StatusCode::kPermissionDenied);
  v1::ListJobsRequest list;
  EXPECT_EQ(c_->list_jobs(bob_, list)->jobs_size(), 0);
  EXPECT_EQ(c_->list_jobs(alice_, list)->jobs_size(), 1);
  EXPECT_TRUE(c_->authenticate("fp8u_nonsense").status().code() == absl::StatusCode::kUnauthenticated);
  auto token = c_->create_token(Role::kUser, "carol");
  ASSERT_TRUE(token.ok());
  auto carol = c_->authenticate(*token);
  ASSERT_TRUE(carol.ok());
  EXPECT_EQ(carol->name, "carol");
  EXPECT_EQ(carol->role, Role::kUser);
}

TEST_F(CoordinatorTest, InvalidSpecsNameTheField) {
  v1::JobSpec bad = make_spec(1);
  bad.mutable_model()->set_n_heads(5);
  v1::SubmitJobRequest r;
  *r.mutable_spec() = bad;
  auto got = c_->submit(alice_, r);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("spec.model.n_heads"), std::string::npos) << got.status();

  *r.mutable_spec() = make_spec(1);
  r.mutable_spec()->mutable_data()->set_path((dir_ / "data" / ".." / ".." / "etc" / "passwd").string());
  got = c_->submit(alice_, r);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("spec.data.path"), std::string::npos) << got.status();

  *r.mutable_spec() = make_spec(1);
  r.mutable_spec()->mutable_checkpoint()->set_dir("/tmp/elsewhere");
  got = c_->submit(alice_, r);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("spec.checkpoint.dir"), std::string::npos) << got.status();
  // Nothing was queued.
  EXPECT_EQ(c_->list_jobs(admin_, v1::ListJobsRequest())->jobs_size(), 0);
}

TEST_F(CoordinatorTest, IdempotentSubmit) {
  v1::SubmitJobRequest r;
  *r.mutable_spec() = make_spec(1);
  r.set_idempotency_key("abc");
  auto first = c_->submit(alice_, r);
  auto second = c_->submit(alice_, r);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->id(), second->id());
}

TEST_F(CoordinatorTest, StateSurvivesARestart) {
  const std::string w0 = add_worker();
  const std::string running = submit_as(alice_, make_spec(1));
  const std::string queued = submit_as(alice_, make_spec(1));
  const v1::StartRank s0 = beat(w0)[0].start_rank();
  beat(w0, {running_status(s0)});
  open();  // a new coordinator on the same database
  EXPECT_EQ(get(running).state(), v1::Job::RUNNING);
  EXPECT_EQ(get(queued).state(), v1::Job::QUEUED);
  // The worker is known again and its rank carries on.
  EXPECT_TRUE(beat(w0, {running_status(s0)}).empty());
  ASSERT_TRUE(exit(w0, s0, 0).ok());
  EXPECT_EQ(get(running).state(), v1::Job::SUCCEEDED);
  // The freed worker takes the queued job.
  c_->tick();
  EXPECT_EQ(get(queued).state(), v1::Job::RUNNING);
  // Events recorded before and after the restart are in one sequence.
  auto events = c_->events_after(admin_, running, 0, true);
  ASSERT_TRUE(events.ok());
  ASSERT_GE(events->events.size(), 4u);
  for (size_t i = 0; i < events->events.size(); ++i) EXPECT_EQ(events->events[i].sequence(), int64_t(i) + 1);
  EXPECT_TRUE(events->job_final);
}

// Every rank reports its own cast amaxes; one rank far above the other is an AMAX_OUTLIER
// event naming it (once per cast and attempt), and the job API shows them side by side.
TEST_F(CoordinatorTest, OneRanksAmaxFarAboveTheOthersIsAnOutlierEvent) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(2));
  const v1::StartRank s0 = beat(w0)[0].start_rank(), s1 = beat(w1)[0].start_rank();
  auto trainer = c_->authenticate(s0.trainer_token());
  ASSERT_TRUE(trainer.ok());
  for (int64_t step : {10, 20}) {
    for (int rank : {0, 1}) {
      v1::ReportCastNumericsRequest r;
      r.mutable_caller()->set_job_id(id);
      r.mutable_caller()->set_attempt(1);
      r.mutable_caller()->set_rank(rank);
      r.set_step(step);
      v1::CastNumerics* c = r.add_casts();
      c->set_layer("layers.0.attention.wq");
      c->set_operand(v1::AmaxHistory::INPUT);
      c->set_amax(rank == 1 ? 50.0f : 2.0f);  // rank 1: an injected outlier, 25x
      c->set_scale(1);
      ASSERT_TRUE(c_->report_cast_numerics(*trainer, r).ok());
    }
  }
  auto events = c_->events_after(admin_, id, 0, false);
  ASSERT_TRUE(events.ok());
  int outliers = 0;
  for (const v1::JobEvent& e : events->events) {
    if (!e.has_numerics() || e.numerics().kind() != v1::NumericsEvent::AMAX_OUTLIER) continue;
    ++outliers;
    EXPECT_EQ(e.numerics().rank(), 1);
    EXPECT_EQ(e.numerics().step(), 10);
    EXPECT_EQ(e.numerics().layer(), "layers.0.attention.wq");
    EXPECT_NE(e.numerics().message().find("rank 1's amax 50"), std::string::npos) << e.numerics().message();
  }
  EXPECT_EQ(outliers, 1) << "once per cast and attempt";
  auto shown = c_->get_job_amax(alice_, id, /*by_rank=*/true);
  ASSERT_TRUE(shown.ok()) << shown.status();
  ASSERT_EQ(shown->by_rank_size(), 1);
  EXPECT_EQ(shown->by_rank(0).step(), 20);
  ASSERT_EQ(shown->by_rank(0).amax_size(), 2);
  EXPECT_FLOAT_EQ(shown->by_rank(0).amax(0), 2.0f);
  EXPECT_FLOAT_EQ(shown->by_rank(0).amax(1), 50.0f);
  ASSERT_EQ(shown->by_rank(0).history_size(), 2);
  EXPECT_EQ(shown->by_rank(0).history(0).rank(), 1);
  EXPECT_EQ(c_->get_job_amax(alice_, id)->by_rank_size(), 0) << "only when asked";
  // A restarted coordinator answers the same: each completed step was stored.
  open();
  auto restarted = c_->get_job_amax(alice_, id, /*by_rank=*/true);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  ASSERT_EQ(restarted->by_rank_size(), 1);
  EXPECT_EQ(restarted->by_rank(0).DebugString(), shown->by_rank(0).DebugString());
  // Still answered after the job ended and left the active set, and after one more restart.
  beat(w0, {running_status(s0)});
  beat(w1, {running_status(s1)});
  ASSERT_TRUE(exit(w0, s0, 0).ok());
  ASSERT_TRUE(exit(w1, s1, 0).ok());
  ASSERT_EQ(get(id).state(), v1::Job::SUCCEEDED);
  c_->tick();
  auto after = c_->get_job_amax(alice_, id, /*by_rank=*/true);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->by_rank_size(), 1);
  EXPECT_FLOAT_EQ(after->by_rank(0).amax(1), 50.0f);
  open();
  after = c_->get_job_amax(alice_, id, /*by_rank=*/true);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->by_rank_size(), 1);
  EXPECT_EQ(after->by_rank(0).DebugString(), shown->by_rank(0).DebugString());
}

TEST_F(CoordinatorTest, AmaxHistoriesMergeAcrossRanks) {
  const std::string w0 = add_worker(), w1 = add_worker();
  const std::string id = submit_as(alice_, make_spec(2));
  const v1::StartRank s0 = beat(w0)[0].start_rank(), s1 = beat(w1)[0].start_rank();
  auto trainer = c_->authenticate(s0.trainer_token());
  ASSERT_TRUE(trainer.ok());
  for (int rank : {0, 1}) {
    v1::ReportAmaxHistoriesRequest r;
    r.mutable_caller()->set_job_id(id);
    r.mutable_caller()->set_attempt(1);
    r.mutable_caller()->set_rank(rank);
    r.set_step(5);
    v1::AmaxHistory* h = r.add_histories();
    h->set_layer("layers.0.attention.wq");
    h->set_operand(v1::AmaxHistory::INPUT);
    h->add_history(rank == 0 ? 1.0f : 2.0f);
    h->add_history(rank == 0 ? 4.0f : 3.0f);
    h->set_scale(rank == 0 ? 100.0f : 112.0f);
    h->set_range_use(rank == 0 ? 0.9f : 1.25f);  // rank 1's cast saturated
    ASSERT_TRUE(c_->report_amax_histories(*trainer, r).ok());
  }
  v1::GetAmaxHistoriesRequest get;
  get.mutable_caller()->set_job_id(id);
  get.mutable_caller()->set_attempt(1);
  auto got = c_->get_amax_histories(*trainer, get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->step(), 5);
  ASSERT_EQ(got->histories_size(), 1);
  EXPECT_FLOAT_EQ(got->histories(0).history(0), 2.0f);
  EXPECT_FLOAT_EQ(got->histories(0).history(1), 4.0f);
  EXPECT_FLOAT_EQ(got->histories(0).scale(), 100.0f);
  // The saturation is one numerics event naming the cast.
  auto events = c_->events_after(admin_, id, 0, false);
  ASSERT_TRUE(events.ok());
  int saturations = 0;
  for (const v1::JobEvent& e : events->events) {
    if (!e.has_numerics() || e.numerics().kind() != v1::NumericsEvent::SATURATION) continue;
    ++saturations;
    EXPECT_EQ(e.numerics().layer(), "layers.0.attention.wq");
    EXPECT_FLOAT_EQ(static_cast<float>(e.numerics().value()), 1.25f);
  }
  EXPECT_EQ(saturations, 1);
  // The job API shows the merged histories to the job's owner.
  auto shown = c_->get_job_amax(alice_, id);
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->step(), 5);
  ASSERT_EQ(shown->histories_size(), 1);
  EXPECT_FLOAT_EQ(shown->histories(0).history(0), 2.0f);
  EXPECT_EQ(c_->get_job_amax(bob_, id).status().code(), absl::StatusCode::kNotFound);
  // A bad report is refused whole, naming the entry.
  v1::ReportAmaxHistoriesRequest bad;
  bad.mutable_caller()->set_job_id(id);
  bad.mutable_caller()->set_attempt(1);
  bad.set_step(6);
  v1::AmaxHistory* h = bad.add_histories();
  h->set_layer("layers.0.attention.wq");
  h->set_operand(v1::AmaxHistory::INPUT);
  h->add_history(-1.0f);
  h->set_scale(1.0f);
  const absl::Status refused = c_->report_amax_histories(*trainer, bad);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("histories[0].history"), std::string::npos) << refused;
  (void)s1;
}

}  // namespace
}  // namespace fp8::server
