// The control plane against a hostile tenant and a careless operator, over the real
// daemons on loopback: oversize specs and fields, links out of the roots (also one swapped
// in after the job was admitted), another user's folders, a stopped (hung) rank, a second
// coordinator on the same state, a lost database, and reports held back by an outage.
#include <dirent.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "fp8/v1/worker_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/system/control_plane.h"

namespace fp8::system_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr seconds kJobLimit{240};

bool final(const v1::Job& j) {
  return j.state() == v1::Job::SUCCEEDED || j.state() == v1::Job::FAILED || j.state() == v1::Job::CANCELLED;
}

// The pid of the fp8-train process of `job_id` under this test's folder (its command line
// names both: other tests running beside this one have their own job-1), or 0.
pid_t trainer_pid(const fs::path& test_dir, const std::string& job_id) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in(fs::path("/proc") / e->d_name / "cmdline", std::ios::binary);
    std::stringstream cmdline;
    cmdline << in.rdbuf();
    const std::string args = cmdline.str();
    if (args.find("fp8-train") != std::string::npos && args.find(test_dir.string()) != std::string::npos &&
        args.find(std::string("--job-id\0", 9) + job_id + '\0') != std::string::npos) {
      found = pid;
      break;
    }
  }
  closedir(proc);
  return found;
}

grpc::Status list_jobs(const ControlPlane& cp, v1::ListJobsResponse* out) {
  auto ctx = with_token(cp.admin_token(), seconds(10));
  return cp.job_stub()->ListJobs(ctx.get(), v1::ListJobsRequest(), out);
}

TEST(HostileInputTest, OversizeSpecsAndFieldsAreRefusedAndTheFleetWorksOn) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 10;
  const v1::JobSpec good = cp.spec(o);

  v1::Job job;
  v1::JobSpec many_labels = good;
  for (int i = 0; i < 400'000; ++i) (*many_labels.mutable_labels())["l" + std::to_string(i)] = "v";
  grpc::Status s = cp.submit(many_labels, &job);  // ~5 MB: more than a request may be
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  v1::JobSpec long_path = good;
  long_path.mutable_data()->set_path(cp.dir().string() + "/" + std::string(1 << 20, 'p'));
  s = cp.submit(long_path, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("more than the limit of 65536"), std::string::npos) << s.error_message();
  v1::JobSpec some_labels = good;
  for (int i = 0; i < 65; ++i) (*some_labels.mutable_labels())["l" + std::to_string(i)] = "v";
  s = cp.submit(some_labels, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "spec.labels: 65 entries, more than the limit of 64");

  // A worker offering a megabyte of version, or no slot, does not register.
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(cp.port()), grpc::InsecureChannelCredentials());
  auto workers = v1::WorkerService::NewStub(channel);
  v1::RegisterWorkerRequest reg;
  reg.set_device_kind(v1::ResourceSpec::CPU);
  reg.set_device_name("cpu");
  reg.set_slots(1);
  reg.set_version(std::string(1 << 20, '1'));
  v1::RegisterWorkerResponse registered;
  auto ctx = with_token(cp.worker_token(), seconds(10));
  s = workers->RegisterWorker(ctx.get(), reg, &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("version"), std::string::npos) << s.error_message();
  reg.set_version("0.1.0");
  reg.set_slots(0);
  ctx = with_token(cp.worker_token(), seconds(10));
  EXPECT_EQ(workers->RegisterWorker(ctx.get(), reg, &registered).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // An id longer than ids are is refused as such, not looked up.
  v1::Job missing;
  s = cp.get(std::string(65, 'j'), &missing);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "job_id: 65 bytes, more than the limit of 64");
  s = cp.get("job-404", &missing);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  // Nothing was stored, listing works, and the worker still takes work.
  v1::ListJobsResponse listed;
  ASSERT_TRUE(list_jobs(cp, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 0);
  ASSERT_TRUE(cp.submit(good, &job).ok());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  EXPECT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
}

TEST(HostileInputTest, InvalidUtf8IsRefusedWithoutFillingTheLog) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  ControlPlane::JobOptions o;
  o.world_size = 1;
  v1::JobSpec spec = cp.spec(o);
  spec.set_name("\xff\xfe");  // this client sends it as it is (protobuf only warns here)
  v1::Job job;
  grpc::Status s = cp.submit(spec, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "request: fp8.v1.JobSpec.name is not valid UTF-8");
  // Without a token, many times: each refused, and the coordinator's log barely grows.
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  for (int i = 0; i < 50; ++i) {
    auto ctx = with_token("", seconds(10));
    EXPECT_EQ(cp.job_stub()->Submit(ctx.get(), request, &job).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  const std::string logs = cp.logs();
  EXPECT_EQ(logs.find("invalid UTF-8"), std::string::npos) << logs;
  size_t lines = 0;
  for (size_t at = logs.find("did not parse"); at != std::string::npos; at = logs.find("did not parse", at + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << logs;
  v1::ListJobsResponse listed;
  ASSERT_TRUE(list_jobs(cp, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 0);
}

TEST(HostileInputTest, PathsCannotLeaveTheirRoots) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 10;
  v1::Job job;

  // A link inside the data root that leads to /etc.
  fs::create_symlink("/etc", cp.dir() / "etc-link");
  v1::JobSpec passwd = cp.spec(o);
  passwd.mutable_data()->set_path((cp.dir() / "etc-link" / "passwd").string());
  grpc::Status s = cp.submit(passwd, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("symbolic link"), std::string::npos) << s.error_message();

  // Another user's folder: refused; each user's jobs get folders of their own.
  const std::string alice = cp.create_token("user", "alice"), bob = cp.create_token("user", "bob");
  v1::JobSpec mine = cp.spec(o);
  mine.clear_owner();
  mine.mutable_checkpoint()->set_dir((cp.dir() / "alice" / "run").string());  // the root is cp.dir()
  s = cp.submit(mine, &job, bob);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("owner 'bob'"), std::string::npos) << s.error_message();
  v1::Job first, second;
  ASSERT_TRUE(cp.submit(mine, &first, alice).ok());
  ASSERT_TRUE(cp.submit(mine, &second, alice).ok());  // the same spec again
  EXPECT_NE(first.spec().checkpoint().dir(), second.spec().checkpoint().dir());
  for (const v1::Job* j : {&first, &second}) {
    const v1::Job done = cp.wait_for(j->id(), final, kJobLimit);
    EXPECT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
    EXPECT_TRUE(fs::exists(fs::path(done.spec().checkpoint().dir()) / "step-00000010" / "COMMITTED"))
        << done.spec().checkpoint().dir();
  }

  // A link swapped in after the job was admitted (it waits for a second worker): the
  // worker opens the corpus beneath the root without following it, and the attempt fails
  // saying why.
  fs::create_directories(cp.dir() / "data");
  fs::copy_file(cp.dir() / "corpus.txt", cp.dir() / "data" / "corpus.txt");
  o.world_size = 2;
  v1::JobSpec swapped = cp.spec(o);
  swapped.mutable_data()->set_path((cp.dir() / "data" / "corpus.txt").string());
  ASSERT_TRUE(cp.submit(swapped, &job).ok());
  EXPECT_EQ(cp.wait_for_state(job.id(), v1::Job::QUEUED, seconds(5)).state(), v1::Job::QUEUED);
  fs::rename(cp.dir() / "data", cp.dir() / "data-real");
  fs::create_directories(cp.dir() / "elsewhere");
  fs::copy_file(cp.dir() / "corpus.txt", cp.dir() / "elsewhere" / "corpus.txt");
  fs::create_symlink(cp.dir() / "elsewhere", cp.dir() / "data");
  cp.start_worker();
  const v1::Job failed = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(failed.state(), v1::Job::FAILED) << failed.DebugString() << cp.logs();
  EXPECT_NE(failed.failure_reason().find("symbolic link"), std::string::npos) << failed.failure_reason();
}

TEST(HostileInputTest, AStoppedRankIsCaughtAndTheJobRestarts) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 4000;
  o.checkpoint_every = 1000;
  o.max_restarts = 1;
  v1::JobSpec spec = cp.spec(o);
  spec.mutable_train()->set_log_every(10);
  // Generous enough for a rank's start on a loaded machine, which it also bounds.
  spec.mutable_train()->set_progress_timeout_seconds(8);
  spec.mutable_checkpoint()->set_keep(10);  // the checkpoint of the stop stays to be looked at
  v1::Job job;
  ASSERT_TRUE(cp.submit(spec, &job).ok());
  const v1::Job running =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.latest_progress().step() >= 10 || final(j); }, kJobLimit);
  ASSERT_EQ(running.state(), v1::Job::RUNNING) << running.DebugString() << cp.logs();
  const pid_t trainer = trainer_pid(cp.dir(), job.id());
  ASSERT_GT(trainer, 0);
  ASSERT_EQ(::kill(trainer, SIGSTOP), 0);
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  ASSERT_EQ(done.attempts(), 2);
  EXPECT_NE(done.attempt_history(0).end_reason().find("hung"), std::string::npos) << done.DebugString();
  // The stopped rank, continued and told to stop, checkpointed on its way out (too late to
  // commit it at the coordinator: its attempt had ended); the restart resumed from that
  // checkpoint, and the attempt records the step its rank reported loading.
  const int64_t resumed = done.attempt_history(1).resumed_from_step();
  EXPECT_GT(resumed, 0) << done.DebugString();
  char step_dir[32];
  std::snprintf(step_dir, sizeof(step_dir), "step-%08lld", static_cast<long long>(resumed));
  EXPECT_TRUE(fs::exists(fs::path(done.spec().checkpoint().dir()) / step_dir / "COMMITTED")) << step_dir;
}

TEST(HostileInputTest, OneStateHasOneCoordinator) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cli_test::RunResult second = cp.run_another_coordinator(std::chrono::milliseconds(30'000));
  EXPECT_TRUE(second.exit.exited && second.exit.code == 1) << second.err;
  EXPECT_NE(second.err.find("another fp8-coordinator (pid"), std::string::npos) << second.err;

  // A lost database (truncated to nothing) with the tokens of the first start beside it:
  // refused, and the tokens every worker and user holds are left as they were.
  const std::string admin = cp.admin_token();
  cp.kill_coordinator(SIGTERM);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const fs::path f = cp.dir() / (std::string("fp8-coordinator.db") + suffix);
    if (fs::exists(f)) fs::resize_file(f, 0);
  }
  cli_test::RunResult empty = cp.run_another_coordinator(std::chrono::milliseconds(30'000));
  EXPECT_TRUE(empty.exit.exited && empty.exit.code == 1) << empty.err;
  EXPECT_NE(empty.err.find("the state was lost or replaced"), std::string::npos) << empty.err;
  EXPECT_EQ(cp.admin_token(), admin);
  EXPECT_EQ(fs::file_size(cp.dir() / "fp8-coordinator.db"), 0u);
}

TEST(HostileInputTest, AKillLosesNoAcknowledgedSubmitOrCancel) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  ControlPlane::JobOptions o;
  o.world_size = 1;
  const v1::JobSpec spec = cp.spec(o);  // no worker: they stay queued
  std::vector<std::string> ids;
  std::set<std::string> cancelled;
  for (int i = 0; i < 20; ++i) {
    v1::Job job;
    ASSERT_TRUE(cp.submit(spec, &job).ok());
    ids.push_back(job.id());
    if (i % 4 == 0) {
      ASSERT_TRUE(cp.cancel(job.id(), &job).ok());
      cancelled.insert(job.id());
    }
  }
  cp.kill_coordinator(SIGKILL);  // right after the last acknowledgement
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  for (const std::string& id : ids) {
    v1::Job job;
    ASSERT_TRUE(cp.get(id, &job).ok()) << id;
    EXPECT_EQ(job.state(), cancelled.count(id) ? v1::Job::CANCELLED : v1::Job::QUEUED) << id;
  }
}

TEST(HostileInputTest, ProgressDuringAnOutageArrivesAfterIt) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 3000;
  o.checkpoint_every = 0;
  v1::JobSpec spec = cp.spec(o);
  spec.mutable_train()->set_log_every(25);
  v1::Job job;
  ASSERT_TRUE(cp.submit(spec, &job).ok());
  const v1::Job running =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.latest_progress().step() >= 25 || final(j); }, kJobLimit);
  ASSERT_EQ(running.state(), v1::Job::RUNNING) << running.DebugString() << cp.logs();
  // Progress is written in group commits; listing writes what is pending, so that the
  // kill below loses nothing acknowledged before it.
  v1::ListJobsResponse listed;
  ASSERT_TRUE(list_jobs(cp, &listed).ok());
  const int64_t written = listed.jobs(0).latest_progress().step();
  cp.kill_coordinator(SIGKILL);
  std::this_thread::sleep_for(seconds(3));
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  ASSERT_EQ(done.attempts(), 1);
  // Every report of the run is in the history, those sent while the coordinator was away
  // included.
  v1::WatchJobRequest watch;
  watch.set_job_id(job.id());
  watch.set_include_progress(true);
  auto ctx = with_token(cp.admin_token(), seconds(30));
  auto stub = cp.job_stub();
  auto reader = stub->WatchJob(ctx.get(), watch);
  std::set<int64_t> steps;
  v1::JobEvent e;
  while (reader->Read(&e)) {
    if (e.has_progress()) steps.insert(e.progress().progress().step());
  }
  EXPECT_TRUE(reader->Finish().ok());
  std::set<int64_t> want = {1};  // the first step always reports
  for (int64_t s = 25; s <= 3000; s += 25) want.insert(s);
  // What was reported after the listing was acknowledged or held back by the trainer;
  // what the kill may have lost is only what was acknowledged after the listing.
  for (int64_t s : want) {
    if (s <= written || s > written + 25 * 4) {
      EXPECT_TRUE(steps.count(s)) << "step " << s << " missing";
    }
  }
}

}  // namespace
}  // namespace fp8::system_test
