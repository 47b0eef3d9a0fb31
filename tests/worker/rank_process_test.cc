#include "worker/fp8_worker/rank_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <mutex>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"

#include "tests/worker/worker_test_util.h"

namespace fp8::worker {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::wait_for;

struct Captured {
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<int64_t> times;
  std::vector<std::optional<fp8::log::Level>> levels;
  LineSink sink() {
    return [this](absl::string_view line, int64_t time_unix_ms, std::optional<fp8::log::Level> level) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(line);
      times.push_back(time_unix_ms);
      levels.push_back(level);
    };
  }
};

std::unique_ptr<RankProcess> spawn_shell(const std::string& script, const std::string& log, LineSink sink = {}) {
  absl::StatusOr<std::unique_ptr<RankProcess>> p = RankProcess::spawn({"/bin/sh", "-c", script}, {"PATH=/usr/bin:/bin"}, log, std::move(sink));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

ProcessExit wait_for_exit(RankProcess& p) {
  std::optional<ProcessExit> e;
  EXPECT_TRUE(wait_for([&] { return (e = p.poll()).has_value(); }));
  return e.value_or(ProcessExit{});
}

TEST(RankProcess, ExitCodeOutputAndLastLine) {
  TempDir dir;
  Captured captured;
  const std::string log = dir.path() + "/output.log";
  auto p = spawn_shell("echo first; echo second >&2; echo 'the end'; echo; echo '   '; exit 3", log, captured.sink());
  ASSERT_NE(p, nullptr);
  ProcessExit e = wait_for_exit(*p);
  ASSERT_TRUE(e.exit_code.has_value());
  EXPECT_EQ(*e.exit_code, 3);
  EXPECT_FALSE(e.signal.has_value());
  EXPECT_EQ(p->last_line(), "the end");
  EXPECT_EQ(read_file(log), "first\nsecond\nthe end\n\n   \n");
  std::lock_guard<std::mutex> lock(captured.mu);
  EXPECT_EQ(captured.lines, (std::vector<std::string>{"first", "second", "the end", "", "   "}));
  // The exit stays put.
  EXPECT_EQ(p->poll()->exit_code, 3);
}

TEST(RankProcess, TheTrainersJsonLogLinesGoOnAsTheirMessageLevelAndTime) {
  TempDir dir;
  Captured captured;
  const std::string log = dir.path() + "/output.log";
  const std::string warning =
      R"({"time":"2026-01-02T03:04:05.678Z","level":"warning","component":"fp8-train","rank":1,"message":"low \"disk\""})";
  auto p = spawn_shell("echo '" + warning + "'; echo 'plain words'; exit 1", log, captured.sink());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(wait_for_exit(*p).exit_code, 1);
  EXPECT_EQ(p->last_line(), "plain words");
  EXPECT_EQ(read_file(log), warning + "\nplain words\n") << "output.log keeps what the rank wrote";
  std::lock_guard<std::mutex> lock(captured.mu);
  ASSERT_EQ(captured.lines, (std::vector<std::string>{"low \"disk\"", "plain words"}));
  EXPECT_EQ(captured.levels[0], fp8::log::Level::kWarning);
  EXPECT_EQ(captured.times[0], absl::ToUnixMillis(absl::FromCivil(absl::CivilSecond(2026, 1, 2, 3, 4, 5),
                                                                  absl::UTCTimeZone())) + 678);
  EXPECT_EQ(captured.levels[1], std::nullopt) << "a line outside the log has no level";
}

TEST(RankProcess, LineWithoutNewlineAtTheEndCounts) {
  TempDir dir;
  auto p = spawn_shell("printf 'a\\nlast words'", dir.path() + "/output.log");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(wait_for_exit(*p).exit_code, 0);
  EXPECT_EQ(p->last_line(), "last words");
}

TEST(RankProcess, InvalidUtf8IsCleaned) {
  TempDir dir;
  auto p = spawn_shell("printf 'ok \\377\\n'", dir.path() + "/output.log");
  ASSERT_NE(p, nullptr);
  wait_for_exit(*p);
  EXPECT_EQ(p->last_line(), "ok ?");
}

TEST(RankProcess, KilledBySignal) {
  TempDir dir;
  auto p = spawn_shell("echo dying; kill -SEGV $$; sleep 5", dir.path() + "/output.log");
  ASSERT_NE(p, nullptr);
  ProcessExit e = wait_for_exit(*p);
  ASSERT_TRUE(e.signal.has_value());
  EXPECT_EQ(*e.signal, SIGSEGV);
  EXPECT_FALSE(e.exit_code.has_value());
  EXPECT_EQ(p->last_line(), "dying");
}

TEST(RankProcess, OwnProcessGroup) {
  TempDir dir;
  auto p = spawn_shell("echo up; sleep 30", dir.path() + "/output.log");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(wait_for([&] { return p->has_output(); }));
  EXPECT_EQ(::getpgid(p->pid()), p->pid());
  EXPECT_NE(::getpgid(p->pid()), ::getpgrp());
  p->signal(SIGKILL);
  EXPECT_EQ(wait_for_exit(*p).signal, SIGKILL);
}

TEST(RankProcess, TermReachesTheTrapAndTheWholeGroup) {
  TempDir dir;
  auto p = spawn_shell("trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.1; done",
                      dir.path() + "/output.log");
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(wait_for([&] { return p->has_output(); }));
  p->signal(SIGTERM);
  ProcessExit e = wait_for_exit(*p);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(p->last_line(), "bye");
}

// A grandchild that keeps the pipe open must not keep the exit from being seen.
TEST(RankProcess, LeftoverChildDoesNotHoldTheExit) {
  TempDir dir;
  auto p = spawn_shell("sleep 300 & echo done; exit 4", dir.path() + "/output.log");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(wait_for_exit(*p).exit_code, 4);
  EXPECT_EQ(p->last_line(), "done");
}

TEST(RankProcess, MissingProgramIsASpawnError) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<RankProcess>> p =
      RankProcess::spawn({"/nonexistent/fp8-train", "--config", "x"}, {}, dir.path() + "/output.log", {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("/nonexistent/fp8-train"), absl::string_view::npos) << p.status();
}

TEST(RankProcess, UnwritableLogIsASpawnError) {
  absl::StatusOr<std::unique_ptr<RankProcess>> p =
      RankProcess::spawn({"/bin/true"}, {}, "/nonexistent/dir/output.log", {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("/nonexistent/dir/output.log"), absl::string_view::npos) << p.status();
}

TEST(RankProcess, EnvironmentIsExactlyTheOneGiven) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<RankProcess>> p = RankProcess::spawn(
      {"/bin/sh", "-c", "echo \"token=$FP8_TRAINER_TOKEN home=$HOME\""}, {"FP8_TRAINER_TOKEN=abc"},
      dir.path() + "/output.log", {});
  ASSERT_TRUE(p.ok()) << p.status();
  wait_for_exit(**p);
  EXPECT_EQ((*p)->last_line(), "token=abc home=");
}

TEST(RankProcess, DestructorKillsARunningChild) {
  TempDir dir;
  pid_t pid = 0;
  {
    auto p = spawn_shell("echo up; sleep 300", dir.path() + "/output.log");
    ASSERT_NE(p, nullptr);
    pid = p->pid();
    ASSERT_TRUE(wait_for([&] { return p->has_output(); }));
  }
  // Reaped: no such process any more (not even a zombie).
  EXPECT_EQ(::kill(pid, 0), -1);
}

}  // namespace
}  // namespace fp8::worker
