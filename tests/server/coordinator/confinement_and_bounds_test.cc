// The coordinator against a hostile tenant, driven directly (no gRPC): paths that escape
// their roots through links, checkpoint folders of other jobs and users, reused
// idempotency keys, reports that do not match the job, placement against what workers
// offer (cores, memory, device), hung ranks, restart backoff, and what the attempt records
// of its resume. The daemons' side of the
// same is in tests/system/hostile_input_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/server/coordinator/coordinator_fixture.h"

namespace fp8::server {
namespace {

absl::StatusCode submit_code(Coordinator& c, const Principal& who, const v1::JobSpec& spec, std::string* message) {
  v1::SubmitJobRequest r;
  *r.mutable_spec() = spec;
  auto got = c.submit(who, r);
  if (message != nullptr) *message = std::string(got.status().message());
  return got.status().code();
}

TEST_F(CoordinatorTest, EachSubmissionGetsAFolderOfItsOwn) {
  const std::string first = submit_as(alice_, make_spec(1));
  const std::string second = submit_as(alice_, make_spec(1));  // the same spec again
  const std::string a = get(first).spec().checkpoint().dir(), b = get(second).spec().checkpoint().dir();
  EXPECT_EQ(a, (dir_ / "ckpt" / "alice" / "tiny" / first).string());
  EXPECT_EQ(b, (dir_ / "ckpt" / "alice" / "tiny" / second).string());
}

TEST_F(CoordinatorTest, UsersStayInTheirOwnFolders) {
  v1::JobSpec into_alices = make_spec(1);  // its folder is under ckpt/alice/
  std::string message;
  EXPECT_EQ(submit_code(*c_, bob_, into_alices, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.checkpoint.dir"), std::string::npos) << message;
  EXPECT_NE(message.find((dir_ / "ckpt" / "bob" / "").string()), std::string::npos) << message;
  // The root itself, or the user's own folder as a whole, is not a job's either.
  v1::JobSpec at_root = make_spec(1);
  at_root.mutable_checkpoint()->set_dir((dir_ / "ckpt" / "alice").string());
  EXPECT_EQ(submit_code(*c_, alice_, at_root, nullptr), absl::StatusCode::kInvalidArgument);
  // An admin runs jobs for anyone, anywhere under the roots.
  EXPECT_EQ(submit_code(*c_, admin_, into_alices, nullptr), absl::StatusCode::kOk);
  // An owner that cannot name a folder is refused.
  v1::JobSpec sneaky = make_spec(1);
  sneaky.set_owner("../bob");
  EXPECT_EQ(submit_code(*c_, admin_, sneaky, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.owner"), std::string::npos) << message;
  EXPECT_FALSE(c_->create_token(Role::kUser, "a/b").ok());
}

TEST_F(CoordinatorTest, NoJobFolderInsideAnother) {
  const std::string first = submit_as(alice_, make_spec(1));
  v1::JobSpec inside = make_spec(1);
  inside.mutable_checkpoint()->set_dir(get(first).spec().checkpoint().dir() + "/nested");
  std::string message;
  EXPECT_EQ(submit_code(*c_, alice_, inside, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find(first), std::string::npos) << message;
}

TEST_F(CoordinatorTest, LinksOutOfTheRootsAreRefused) {
  fs::create_directories(dir_ / "data");
  fs::create_directories(dir_ / "ckpt" / "alice");
  fs::create_directories(dir_ / "outside");
  fs::create_symlink("/etc", dir_ / "data" / "etc");
  fs::create_symlink(dir_ / "outside", dir_ / "ckpt" / "alice" / "escape");
  v1::JobSpec data = make_spec(1);
  data.mutable_data()->set_path((dir_ / "data" / "etc" / "passwd").string());
  std::string message;
  EXPECT_EQ(submit_code(*c_, alice_, data, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.data.path"), std::string::npos) << message;
  EXPECT_NE(message.find("/etc/passwd"), std::string::npos) << message;  // where it leads
  v1::JobSpec checkpoints = make_spec(1);
  checkpoints.mutable_checkpoint()->set_dir((dir_ / "ckpt" / "alice" / "escape" / "run").string());
  EXPECT_EQ(submit_code(*c_, alice_, checkpoints, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.checkpoint.dir"), std::string::npos) << message;
  // A link that stays inside the roots is resolved: the job names the real file.
  std::ofstream(dir_ / "data" / "real.txt") << "text";
  fs::create_symlink(dir_ / "data" / "real.txt", dir_ / "data" / "alias.txt");
  v1::JobSpec inside = make_spec(1);
  inside.mutable_data()->set_path((dir_ / "data" / "alias.txt").string());
  const std::string id = submit_as(alice_, inside);
  EXPECT_EQ(get(id).spec().data().path(), (dir_ / "data" / "real.txt").string());
  EXPECT_EQ(c_->list_jobs(admin_, v1::ListJobsRequest())->jobs_size(), 1);  // the refused ones left nothing
}

// data.val_path is confined as data.path is, under the same root (the worker opens both
// beneath the one root it is handed).
TEST_F(CoordinatorTest, AValidationPathIsConfinedAsTheDataPathIs) {
  fs::create_directories(dir_ / "data");
  fs::create_symlink("/etc", dir_ / "data" / "etc");
  std::ofstream(dir_ / "data" / "val.txt") << "text";
  v1::JobSpec escaping = make_spec(1);
  escaping.mutable_data()->set_val_path((dir_ / "data" / "etc" / "passwd").string());
  std::string message;
  EXPECT_EQ(submit_code(*c_, alice_, escaping, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.data.val_path"), std::string::npos) << message;
  v1::JobSpec inside = make_spec(1);
  inside.mutable_data()->set_val_path((dir_ / "data" / "val.txt").string());
  const std::string id = submit_as(alice_, inside);
  EXPECT_EQ(get(id).spec().data().val_path(), (dir_ / "data" / "val.txt").string());
}

// model.init_from (a folder) is confined as data.path is, under the same root.
TEST_F(CoordinatorTest, AModelToStartFromIsConfinedAsTheDataPathIs) {
  fs::create_directories(dir_ / "data" / "my-model");
  fs::create_symlink("/etc", dir_ / "data" / "etc");
  v1::JobSpec escaping = make_spec(1);
  escaping.mutable_model()->set_init_from((dir_ / "data" / "etc").string());
  std::string message;
  EXPECT_EQ(submit_code(*c_, alice_, escaping, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.model.init_from"), std::string::npos) << message;
  v1::JobSpec inside = make_spec(1);
  inside.mutable_model()->set_init_from((dir_ / "data" / "my-model").string());
  const std::string id = submit_as(alice_, inside);
  EXPECT_EQ(get(id).spec().model().init_from(), (dir_ / "data" / "my-model").string());
}

// A pattern of shards is confined by its folder: one under the root is admitted, one whose
// folder leads out through a link is refused (the worker and the trainer then open every
// match beneath the root themselves).
TEST_F(CoordinatorTest, APatternOfShardsIsConfinedByItsFolder) {
  fs::create_directories(dir_ / "data" / "shards");
  fs::create_symlink("/etc", dir_ / "data" / "etc");
  v1::JobSpec shards = make_spec(1);
  shards.mutable_data()->set_path((dir_ / "data" / "shards" / "train-*.tokens").string());
  const std::string id = submit_as(alice_, shards);
  EXPECT_EQ(get(id).spec().data().path(), (dir_ / "data" / "shards" / "train-*.tokens").string());
  v1::JobSpec escaping = make_spec(1);
  escaping.mutable_data()->set_path((dir_ / "data" / "etc" / "*").string());
  std::string message;
  EXPECT_EQ(submit_code(*c_, alice_, escaping, &message), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message.find("spec.data.path"), std::string::npos) << message;
}

TEST_F(CoordinatorTest, AnIdempotencyKeyNamesOneSpec) {
  v1::SubmitJobRequest r;
  *r.mutable_spec() = make_spec(1);
  r.set_idempotency_key("k1");
  auto first = c_->submit(alice_, r);
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = c_->submit(alice_, r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->id(), first->id());
  r.mutable_spec()->mutable_train()->set_steps(21);
  auto other = c_->submit(alice_, r);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists) << other.status();
  EXPECT_NE(other.status().message().find(first->id()), std::string::npos);
}

TEST_F(CoordinatorTest, ReportsAreCheckedAgainstTheJob) {
  const RunningJob job = start_running(make_spec(1));
  const std::string& id = job.id;
  const v1::StartRank& s0 = job.start;
  const Principal* trainer = &job.trainer;
  const std::string folder = get(id).spec().checkpoint().dir();
  EXPECT_EQ(s0.spec().checkpoint().dir(), folder);
  EXPECT_EQ(s0.checkpoint_root(), (dir_ / "ckpt").string());
  EXPECT_EQ(s0.data_root(), (dir_ / "data").string());
  v1::CommitCheckpointRequest commit;
  commit.mutable_caller()->set_job_id(id);
  commit.mutable_caller()->set_attempt(1);
  commit.set_world_size(1);
  commit.set_step(21);  // train.steps is 20
  commit.set_dir(folder + "/step-00000021");
  EXPECT_EQ(c_->commit_checkpoint(*trainer, commit).code(), absl::StatusCode::kInvalidArgument);
  commit.set_step(10);
  commit.set_dir((dir_ / "ckpt" / "alice" / "other" / "step-00000010").string());  // not the job's folder
  EXPECT_EQ(c_->commit_checkpoint(*trainer, commit).code(), absl::StatusCode::kInvalidArgument);
  commit.set_dir(folder + "/step-00000010");
  EXPECT_TRUE(c_->commit_checkpoint(*trainer, commit).ok());
  EXPECT_EQ(get(id).last_checkpoint_step(), 10);
  open();  // an acknowledged commit is in the store
  EXPECT_EQ(get(id).last_checkpoint_step(), 10);
}

TEST_F(CoordinatorTest, PlacementHonoursWhatWorkersOffer) {
  v1::RegisterWorkerRequest small;
  small.set_device_kind(v1::ResourceSpec::CPU);
  small.set_device_name("cpu");
  small.set_slots(1);
  small.set_cpus(1);
  small.set_memory_gb(1);
  auto registered = c_->register_worker(worker_, small);
  ASSERT_TRUE(registered.ok()) << registered.status();
  v1::JobSpec big = make_spec(1);
  big.mutable_resources()->set_cpus_per_rank(64);
  big.mutable_resources()->set_memory_gb(1000);
  // No registered worker offers 1000 GiB: refused at submit with the numbers, unless the
  // user queues it anyway for a worker yet to come.
  v1::SubmitJobRequest request;
  *request.mutable_spec() = big;
  request.mutable_spec()->mutable_checkpoint()->set_dir((dir_ / "ckpt" / "alice" / "tiny").string());
  const absl::StatusOr<v1::Job> refused = c_->submit(alice_, request);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("needs 1000.00 GiB (resources.memory_gb), and the largest cpu worker "
                                            "offers 1.00 GiB"),
            std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("--queue-anyway"), std::string::npos) << refused.status();
  request.set_queue_anyway(true);
  const absl::StatusOr<v1::Job> queued = c_->submit(alice_, request);
  ASSERT_TRUE(queued.ok()) << queued.status();
  const std::string id = queued->id();
  c_->tick();
  EXPECT_EQ(get(id).state(), v1::Job::QUEUED);
  v1::RegisterWorkerRequest large = small;
  large.set_cpus(64);
  large.set_memory_gb(2000);
  ASSERT_TRUE(c_->register_worker(worker_, large).ok());
  c_->tick();
  const v1::Job placed = get(id);
  ASSERT_EQ(placed.state(), v1::Job::RUNNING);
  EXPECT_NE(placed.attempt_history(0).ranks(0).worker_id(), registered->worker_id());
  // A worker must offer a slot.
  small.set_slots(0);
  EXPECT_EQ(c_->register_worker(worker_, small).status().code(), absl::StatusCode::kInvalidArgument);
}

// A CPU job that states no resources.memory_gb is placed by its memory estimate: refused
// where every registered worker offers less, accepted where one does not say, and queued
// for the worker that offers enough.
TEST_F(CoordinatorTest, ACpuJobIsPlacedByItsMemoryEstimate) {
  v1::RegisterWorkerRequest tiny;
  tiny.set_device_kind(v1::ResourceSpec::CPU);
  tiny.set_device_name("cpu");
  tiny.set_slots(1);
  tiny.set_memory_gb(0.001);  // about 1 MiB: less than any model's estimate here
  ASSERT_TRUE(c_->register_worker(worker_, tiny).ok());
  v1::SubmitJobRequest request;
  *request.mutable_spec() = make_spec(1);
  request.mutable_spec()->mutable_checkpoint()->set_dir((dir_ / "ckpt" / "alice" / "tiny").string());
  const absl::StatusOr<v1::Job> refused = c_->submit(alice_, request);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("its memory estimate: fp8ctl submit --dry-run"), std::string::npos)
      << refused.status();
  // A worker that does not say what it offers may hold it: accepted, and placed there.
  v1::RegisterWorkerRequest unknown = tiny;
  unknown.set_memory_gb(0);
  const auto open = c_->register_worker(worker_, unknown);
  ASSERT_TRUE(open.ok()) << open.status();
  const absl::StatusOr<v1::Job> accepted = c_->submit(alice_, request);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  c_->tick();
  const v1::Job placed = get(accepted->id());
  ASSERT_EQ(placed.state(), v1::Job::RUNNING);
  EXPECT_EQ(placed.attempt_history(0).ranks(0).worker_id(), open->worker_id());
}

// A GPU job is placed by its memory estimate against what GPU workers offer (each slot its
// GPU's memory): refused where every GPU worker is too small, placed on one that holds it.
TEST_F(CoordinatorTest, AGpuJobIsPlacedByItsMemoryEstimateAgainstItsGpusMemory) {
  v1::RegisterWorkerRequest small_gpu;
  small_gpu.set_device_kind(v1::ResourceSpec::CUDA);
  small_gpu.set_device_name("cuda:0");
  small_gpu.set_slots(1);
  small_gpu.set_memory_gb(0.001);
  ASSERT_TRUE(c_->register_worker(worker_, small_gpu).ok());
  v1::RegisterWorkerRequest big_cpu = small_gpu;  // another kind's memory does not count
  big_cpu.set_device_kind(v1::ResourceSpec::CPU);
  big_cpu.set_device_name("cpu");
  big_cpu.set_memory_gb(1000);
  ASSERT_TRUE(c_->register_worker(worker_, big_cpu).ok());
  v1::SubmitJobRequest request;
  *request.mutable_spec() = make_spec(1);
  request.mutable_spec()->mutable_resources()->set_device(v1::ResourceSpec::CUDA);
  request.mutable_spec()->mutable_checkpoint()->set_dir((dir_ / "ckpt" / "alice" / "gpu").string());
  const absl::StatusOr<v1::Job> refused = c_->submit(alice_, request);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("the largest cuda worker offers 0.00 GiB"), std::string::npos)
      << refused.status();
  v1::RegisterWorkerRequest h100 = small_gpu;
  h100.set_device_name("cuda:1");
  h100.set_memory_gb(79.1);
  const auto fits = c_->register_worker(worker_, h100);
  ASSERT_TRUE(fits.ok()) << fits.status();
  const absl::StatusOr<v1::Job> accepted = c_->submit(alice_, request);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  c_->tick();
  const v1::Job placed = get(accepted->id());
  ASSERT_EQ(placed.state(), v1::Job::RUNNING);
  EXPECT_EQ(placed.attempt_history(0).ranks(0).worker_id(), fits->worker_id());
}

// resources.cpus_per_rank: a job waits for a worker offering that many cores a rank
// (fp8-worker --cpus), saying so, and runs on one that does.
TEST_F(CoordinatorTest, AJobWaitsForAWorkerOfferingItsCpusPerRank) {
  v1::RegisterWorkerRequest two_cores;
  two_cores.set_device_kind(v1::ResourceSpec::CPU);
  two_cores.set_device_name("cpu");
  two_cores.set_slots(1);
  two_cores.set_cpus(2);
  ASSERT_TRUE(c_->register_worker(worker_, two_cores).ok());
  v1::JobSpec spec = make_spec(1);
  spec.mutable_resources()->set_cpus_per_rank(4);
  const std::string id = submit_as(alice_, spec);
  c_->tick();
  EXPECT_EQ(get(id).state(), v1::Job::QUEUED);
  EXPECT_NE(get(id).pending_reason().find("offering 4 cpus"), std::string::npos) << get(id).pending_reason();
  v1::RegisterWorkerRequest four_cores = two_cores;
  four_cores.set_cpus(4);
  const auto four = c_->register_worker(worker_, four_cores);
  ASSERT_TRUE(four.ok()) << four.status();
  c_->tick();
  const v1::Job placed = get(id);
  ASSERT_EQ(placed.state(), v1::Job::RUNNING);
  EXPECT_EQ(placed.attempt_history(0).ranks(0).worker_id(), four->worker_id());
  // Two cores a rank fit the first worker.
  v1::JobSpec small = make_spec(1);
  small.mutable_resources()->set_cpus_per_rank(2);
  const std::string small_id = submit_as(alice_, small);
  c_->tick();
  EXPECT_EQ(get(small_id).state(), v1::Job::RUNNING);
}

// resources.device: a job runs only on workers of its device, whatever else is free.
TEST_F(CoordinatorTest, AJobRunsOnlyOnWorkersOfItsDevice) {
  v1::RegisterWorkerRequest gpu;
  gpu.set_device_kind(v1::ResourceSpec::CUDA);
  gpu.set_device_name("cuda:0");
  gpu.set_slots(1);
  const auto gpu_worker = c_->register_worker(worker_, gpu);
  ASSERT_TRUE(gpu_worker.ok()) << gpu_worker.status();
  const std::string cpu_job = submit_as(alice_, make_spec(1));
  c_->tick();
  EXPECT_EQ(get(cpu_job).state(), v1::Job::QUEUED) << "a cpu job on the only (cuda) worker";
  v1::JobSpec spec = make_spec(1);
  spec.mutable_resources()->set_device(v1::ResourceSpec::CUDA);
  const std::string cuda_job = submit_as(alice_, spec);
  c_->tick();
  const v1::Job placed = get(cuda_job);
  ASSERT_EQ(placed.state(), v1::Job::RUNNING);
  EXPECT_EQ(placed.attempt_history(0).ranks(0).worker_id(), gpu_worker->worker_id());
  const std::string cpu_worker = add_worker();
  c_->tick();
  EXPECT_EQ(get(cpu_job).state(), v1::Job::RUNNING);
  EXPECT_EQ(get(cpu_job).attempt_history(0).ranks(0).worker_id(), cpu_worker);
}

// restarts.backoff_seconds: a failed attempt's restart waits that long (saying so); with
// 0 it restarts at once.
TEST_F(CoordinatorTest, ARestartWaitsOutTheJobsBackoff) {
  for (const int backoff : {0, 600}) {
    SCOPED_TRACE(absl::StrCat("backoff_seconds ", backoff));
    const std::string w0 = add_worker();
    v1::JobSpec spec = make_spec(1, 0, /*max_restarts=*/2);
    spec.mutable_restarts()->set_backoff_seconds(backoff);
    const std::string id = submit_as(alice_, spec);
    const v1::StartRank s0 = beat(w0)[0].start_rank();
    beat(w0, {running_status(s0)});
    ASSERT_TRUE(exit(w0, s0, 1).ok());  // a failure of unknown class: restarted
    c_->tick();
    const v1::Job job = get(id);
    if (backoff == 0) {
      EXPECT_EQ(job.state(), v1::Job::RUNNING);
      EXPECT_EQ(job.attempts(), 2);
    } else {
      EXPECT_EQ(job.state(), v1::Job::RESTARTING);
      EXPECT_EQ(job.attempts(), 1);
      EXPECT_EQ(job.pending_reason().rfind("restart backoff: attempt 2 in ", 0), 0u) << job.pending_reason();
      EXPECT_TRUE(beat(w0).empty()) << "the free worker was given the job before its backoff";
    }
  }
}

TEST_F(CoordinatorTest, AHungRankEndsItsAttempt) {
  const std::string w0 = add_worker();
  v1::JobSpec spec = make_spec(1, 0, /*max_restarts=*/1);
  spec.mutable_train()->set_progress_timeout_seconds(1);
  const std::string id = submit_as(alice_, spec);
  const v1::StartRank s0 = beat(w0)[0].start_rank();
  beat(w0, {running_status(s0)});
  auto trainer = c_->authenticate(s0.trainer_token());
  ASSERT_TRUE(trainer.ok());
  v1::ReportProgressRequest progress;
  progress.mutable_caller()->set_job_id(id);
  progress.mutable_caller()->set_attempt(1);
  progress.mutable_progress()->set_step(5);
  progress.mutable_progress()->set_window_steps(5);
  ASSERT_TRUE(c_->report_progress(*trainer, progress).ok());
  c_->tick();
  EXPECT_EQ(get(id).state(), v1::Job::RUNNING);  // it just reported
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  c_->tick();
  const v1::Job job = get(id);
  EXPECT_EQ(job.state(), v1::Job::RESTARTING);
  EXPECT_NE(job.attempt_history(0).end_reason().find("hung"), std::string::npos) << job.attempt_history(0).end_reason();
  // The rank is told to stop.
  bool stopped = false;
  for (const v1::WorkerCommand& c : beat(w0, {running_status(s0)})) stopped = stopped || c.has_stop_rank();
  EXPECT_TRUE(stopped);
}

TEST_F(CoordinatorTest, TheAttemptRecordsTheStepItResumedFrom) {
  const RunningJob job = start_running(make_spec(1));
  const std::string& id = job.id;
  const Principal* trainer = &job.trainer;
  v1::ReportProgressRequest progress;
  progress.mutable_caller()->set_job_id(id);
  progress.mutable_caller()->set_attempt(1);
  progress.mutable_progress()->set_step(12);
  progress.mutable_progress()->set_window_steps(2);
  progress.set_resumed_from_step(10);
  ASSERT_TRUE(c_->report_progress(*trainer, progress).ok());
  EXPECT_EQ(get(id).attempt_history(0).resumed_from_step(), 10);
  // Held-back reports arrive late: an older step does not move the job back.
  progress.mutable_progress()->set_step(11);
  progress.mutable_progress()->set_window_steps(1);
  ASSERT_TRUE(c_->report_progress(*trainer, progress).ok());
  EXPECT_EQ(get(id).latest_progress().step(), 12);
  progress.set_resumed_from_step(12);  // not below the step it reports
  EXPECT_EQ(c_->report_progress(*trainer, progress).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, JobListsArePagedByBytes) {
  v1::JobSpec heavy = make_spec(1);
  for (int i = 0; i < 64; ++i) (*heavy.mutable_labels())[absl::StrCat("key-", i)] = std::string(250, 'v');
  const int jobs = 80;  // ~20 KB each: more than a page of 1 MiB
  for (int i = 0; i < jobs; ++i) ASSERT_FALSE(submit_as(alice_, heavy).empty());
  v1::ListJobsRequest list;
  list.set_page_size(1000);
  int seen = 0, pages = 0;
  for (;;) {
    auto page = c_->list_jobs(alice_, list);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->ByteSizeLong(), size_t{1} << 20);
    seen += page->jobs_size();
    ++pages;
    if (page->next_page_token().empty()) break;
    list.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(seen, jobs);
  EXPECT_GE(pages, 2);
}

TEST_F(CoordinatorTest, LogAnswersStayWithinAPage) {
  const RunningJob job = start_running(make_spec(1));
  const std::string& id = job.id;
  const Principal* trainer = &job.trainer;
  v1::AppendLogsRequest append;
  append.mutable_caller()->set_job_id(id);
  append.mutable_caller()->set_attempt(1);
  for (int i = 0; i < 500; ++i) append.add_lines()->set_text(absl::StrCat(i, std::string(4000, 'x')));
  for (int call = 0; call < 2; ++call) ASSERT_TRUE(c_->append_logs(*trainer, append).ok());
  v1::GetJobLogsRequest logs;
  logs.set_job_id(id);
  logs.set_tail_lines(10000);
  auto got = c_->get_job_logs(alice_, logs);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LE(got->ByteSizeLong(), size_t{1} << 20);
  EXPECT_TRUE(got->truncated());
  ASSERT_GT(got->lines_size(), 0);
  EXPECT_EQ(got->lines(got->lines_size() - 1).line().text().substr(0, 3), "499");  // the newest
}

}  // namespace
}  // namespace fp8::server
