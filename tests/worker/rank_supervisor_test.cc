#include "worker/fp8_worker/rank_supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "common/jobspec/to_yaml.h"
#include "tests/worker/worker_test_util.h"
#include "worker/fp8_worker/trainer_command.h"

namespace fp8::worker {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::wait_for;
using testing::write_script;

// A worker whose "fp8-train" is a shell script in a temp folder.
class RankSupervisorTest : public ::testing::Test {
 protected:
  WorkerConfig make_config(const std::string& script_body) {
    WorkerConfig c;
    c.trainer = dir_.path() + "/fake-train";
    write_script(c.trainer, script_body);
    c.work_dir = dir_.path() + "/work";
    c.listen_host = "127.0.0.1";
    return c;
  }

  static v1::StartRank make_start(const std::string& job, int attempt, int rank) {
    v1::StartRank s;
    s.set_job_id(job);
    s.set_attempt(attempt);
    s.set_rank(rank);
    s.set_world_size(2);
    s.set_rendezvous_namespace("ns/");
    s.set_coordinator_address("127.0.0.1:7070");
    s.set_trainer_token("tt-123");
    s.mutable_spec()->set_name("tiny");
    return s;
  }

  static std::vector<RankExit> wait_for_exits(RankSupervisor& sup, size_t n) {
    std::vector<RankExit> all;
    EXPECT_TRUE(wait_for([&] {
      sup.poll();
      for (RankExit& e : sup.take_exits()) all.push_back(std::move(e));
      return all.size() >= n;
    }));
    return all;
  }

  static bool wait_running(RankSupervisor& sup) {
    return wait_for([&] {
      sup.poll();
      std::vector<v1::RankStatus> s = sup.statuses();
      return !s.empty() && s[0].state() == v1::RankStatus::RUNNING;
    });
  }

  TempDir dir_;
};

TEST_F(RankSupervisorTest, RunsTheTrainerAndReportsItsExit) {
  RankSupervisor sup(make_config("echo \"args: $*\"; echo \"token: $FP8_TRAINER_TOKEN\"; echo 'loss 1.5'; exit 3"),
                     nullptr, {"PATH=/usr/bin:/bin"});
  const v1::StartRank start = make_start("job-1", 1, 1);
  sup.start(start);
  std::vector<RankExit> exits = wait_for_exits(sup, 1);
  ASSERT_EQ(exits.size(), 1u);
  const RankExit& e = exits[0];
  EXPECT_EQ(e.key, (RankKey{"job-1", 1, 1}));
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_FALSE(e.signal.has_value());
  EXPECT_EQ(e.message, "loss 1.5");
  EXPECT_TRUE(sup.empty());

  const std::string rank_dir = dir_.path() + "/work/job-1/attempt-1/rank-1";
  EXPECT_EQ(read_file(rank_dir + "/job.yaml"), jobspec::to_yaml(start.spec()));
  const std::string log = read_file(rank_dir + "/output.log");
  EXPECT_NE(log.find("args: --config " + rank_dir + "/job.yaml --rank 1 --world-size 2 --coordinator 127.0.0.1:7070 "
                     "--job-id job-1 --attempt 1 --rendezvous-namespace ns/ --listen 127.0.0.1 --log-format json\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("token: tt-123\n"), std::string::npos) << log;
}

TEST_F(RankSupervisorTest, StopWithGraceLetsATrapFinish) {
  RankSupervisor sup(make_config("trap 'echo stopped cleanly; exit 0' TERM; echo ready; while true; do sleep 0.1; done"),
                     nullptr, {"PATH=/usr/bin:/bin"});
  sup.start(make_start("job-2", 1, 0));
  ASSERT_TRUE(wait_running(sup));
  EXPECT_GT(sup.statuses()[0].pid(), 0);
  sup.stop("job-2", 1, 60, "cancelled");
  EXPECT_EQ(sup.statuses().size() <= 1u, true);
  std::vector<RankExit> exits = wait_for_exits(sup, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 0);
  EXPECT_EQ(exits[0].message, "stopped cleanly");
  EXPECT_EQ(exits[0].last_status.state(), v1::RankStatus::STOPPING);
}

TEST_F(RankSupervisorTest, IgnoredTermGetsKillAfterTheGrace) {
  RankSupervisor sup(make_config("trap '' TERM; echo stubborn; while true; do sleep 0.1; done"), nullptr,
                     {"PATH=/usr/bin:/bin"});
  sup.start(make_start("job-3", 1, 0));
  ASSERT_TRUE(wait_running(sup));
  sup.stop("job-3", 1, 1, "cancelled");
  std::vector<RankExit> exits = wait_for_exits(sup, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, SIGKILL);
  EXPECT_FALSE(exits[0].exit_code.has_value());
  EXPECT_EQ(exits[0].message, "stubborn");
}

TEST_F(RankSupervisorTest, GraceZeroKillsAtOnce) {
  RankSupervisor sup(make_config("trap 'exit 0' TERM; echo up; while true; do sleep 0.1; done"), nullptr,
                     {"PATH=/usr/bin:/bin"});
  sup.start(make_start("job-4", 1, 0));
  ASSERT_TRUE(wait_running(sup));
  sup.stop("job-4", 1, 0, "worker lost");
  std::vector<RankExit> exits = wait_for_exits(sup, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, SIGKILL);
}

TEST_F(RankSupervisorTest, CrashBySignalIsReported) {
  RankSupervisor sup(make_config("echo 'about to abort'; kill -ABRT $$"), nullptr, {"PATH=/usr/bin:/bin"});
  sup.start(make_start("job-5", 1, 0));
  std::vector<RankExit> exits = wait_for_exits(sup, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, SIGABRT);
  EXPECT_EQ(exits[0].message, "about to abort");
}

TEST_F(RankSupervisorTest, MissingTrainerIsExit127) {
  WorkerConfig c = make_config("exit 0");
  c.trainer = dir_.path() + "/no-such-trainer";
  RankSupervisor sup(c, nullptr, {});
  sup.start(make_start("job-6", 1, 0));
  std::vector<RankExit> exits = sup.take_exits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 127);
  EXPECT_NE(exits[0].message.find("no-such-trainer"), std::string::npos) << exits[0].message;
  EXPECT_TRUE(sup.empty());
}

TEST_F(RankSupervisorTest, MalformedStartIsExit127) {
  RankSupervisor sup(make_config("exit 0"), nullptr, {});
  v1::StartRank s = make_start("job-7", 1, 5);  // rank outside world size 2
  sup.start(s);
  std::vector<RankExit> exits = sup.take_exits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 127);
  EXPECT_NE(exits[0].message.find("StartRank.rank"), std::string::npos) << exits[0].message;
}

// A spec whose data the worker refuses fails as a configuration error (exit 2), which is
// not restarted by default, where a start the worker cannot carry out is exit 127.
TEST_F(RankSupervisorTest, DataPathThatIsNotAFileIsAConfigurationExit) {
  RankSupervisor sup(make_config("exit 0"), nullptr, {});
  std::filesystem::create_directories(dir_.path() + "/data/corpus.txt");
  v1::StartRank s = make_start("job-7", 1, 0);
  s.set_data_root(dir_.path() + "/data");
  s.mutable_spec()->mutable_data()->set_path(dir_.path() + "/data/corpus.txt");
  sup.start(s);
  std::vector<RankExit> exits = sup.take_exits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 2);
  EXPECT_NE(exits[0].message.find("spec.data.path"), std::string::npos) << exits[0].message;
}

TEST_F(RankSupervisorTest, DuplicateStartIsIgnoredAndStopOnlyHitsItsAttempt) {
  RankSupervisor sup(make_config("trap 'exit 0' TERM; echo up; while true; do sleep 0.1; done"), nullptr,
                     {"PATH=/usr/bin:/bin"});
  sup.start(make_start("job-8", 1, 0));
  sup.start(make_start("job-8", 1, 0));
  sup.start(make_start("job-8", 2, 1));
  EXPECT_EQ(sup.size(), 2u);
  EXPECT_TRUE(sup.take_exits().empty());
  ASSERT_TRUE(wait_for([&] {
    sup.poll();
    for (const v1::RankStatus& s : sup.statuses()) {
      if (s.state() != v1::RankStatus::RUNNING) return false;
    }
    return true;
  }));
  sup.stop("job-8", 2, 30, "restart");
  std::vector<RankExit> exits = wait_for_exits(sup, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].key, (RankKey{"job-8", 2, 1}));
  ASSERT_EQ(sup.size(), 1u);
  EXPECT_EQ(sup.statuses()[0].attempt(), 1);
  sup.stop_all(30, "test over");
  EXPECT_EQ(wait_for_exits(sup, 1).size(), 1u);
}

TEST_F(RankSupervisorTest, OutputGoesToTheLogForwarder) {
  std::vector<std::pair<std::string, v1::AppendLogsRequest>> sent;
  LogForwarder::Options opts;
  opts.background = false;
  LogForwarder fw(
      [&](const std::string& address, const std::string& token, const v1::AppendLogsRequest& r) {
        sent.emplace_back(address + " " + token, r);
        return absl::OkStatus();
      },
      opts);
  RankSupervisor sup(make_config("echo one; echo two"), &fw, {"PATH=/usr/bin:/bin"});
  sup.start(make_start("job-9", 3, 1));
  ASSERT_EQ(wait_for_exits(sup, 1).size(), 1u);
  fw.flush_once();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].first, "127.0.0.1:7070 tt-123");
  const v1::AppendLogsRequest& r = sent[0].second;
  EXPECT_EQ(r.caller().job_id(), "job-9");
  EXPECT_EQ(r.caller().attempt(), 3);
  EXPECT_EQ(r.caller().rank(), 1);
  ASSERT_EQ(r.lines_size(), 2);
  EXPECT_EQ(r.lines(0).text(), "one");
  EXPECT_EQ(r.lines(1).text(), "two");
  EXPECT_GT(r.lines(0).time_unix_ms(), 0);
  // The rank ended: its stream is gone after the last lines went out.
  fw.flush_once();
  EXPECT_EQ(sent.size(), 1u);
}

}  // namespace
}  // namespace fp8::worker
