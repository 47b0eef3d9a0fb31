// The failure contract with real processes: a rank killed between or during collectives, a
// rank that stops answering, a rank that never joins. Every other rank's call returns
// within the timeout (none hangs: the harness would report it), with an error that names
// the rank at fault; after that the group stays broken.
#include <signal.h>

#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/engine/collectives/multi_process.h"
#include "tests/engine/collectives/rank_checks.h"
#include "tests/engine/collectives/scratch_dir.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"

namespace fp8::engine::collectives {
namespace {

using test::RankChecks;
using test::RankReport;

// The collectives of one training step, in a fixed order. Returns the first failure and
// the index of the collective that failed.
struct StepResult {
  absl::Status status;
  int failed_op = -1;
  absl::Duration elapsed;  // of the failing call
};
constexpr int kOpsPerStep = 5;
constexpr const char* kOpNames[kOpsPerStep] = {"all_gather", "all_reduce", "reduce_scatter", "broadcast", "barrier"};

StepResult run_step(ProcessGroup& pg) {
  const int w = pg.size();
  std::vector<uint8_t> shard(4096, static_cast<uint8_t>(pg.rank()));
  std::vector<uint8_t> gathered(shard.size() * w);
  std::vector<float> amax(8, 1.0f);
  std::vector<float> grads(256 * w, 0.5f);
  std::vector<float> grad_shard(256);
  std::vector<uint8_t> header(64, 7);
  const std::function<absl::Status()> ops[kOpsPerStep] = {
      [&] { return pg.all_gather(shard.data(), gathered.data(), shard.size()); },
      [&] { return pg.all_reduce(amax.data(), static_cast<int64_t>(amax.size()), ReduceOp::kMax); },
      [&] { return pg.reduce_scatter(grads.data(), grad_shard.data(), 256, ReduceOp::kSum); },
      [&] { return pg.broadcast(header.data(), header.size(), 0); },
      [&] { return pg.barrier(); },
  };
  for (int i = 0; i < kOpsPerStep; ++i) {
    const absl::Time start = absl::Now();
    absl::Status status = ops[i]();
    if (!status.ok()) return {std::move(status), i, absl::Now() - start};
  }
  return {};
}

// The bound on "came back within the timeout": a hang would exceed it by far, while a
// loaded CI machine may take a few seconds more than the timeout to schedule the rank.
// This separates bounded from hanging; it is not a speed assertion.
constexpr absl::Duration kSlack = absl::Seconds(15);

// Checks on a survivor's failure: the collective it happened in, the status code, the
// rank named, and that the call came back within the timeout.
void check_failure(const StepResult& failure, int want_op, absl::StatusCode want_code, const std::string& want_text,
                   absl::Duration timeout, RankChecks& c) {
  const std::string got = failure.status.ToString();
  c.expect(failure.failed_op == want_op,
           absl::StrCat("failed in collective #", failure.failed_op, ", expected #", want_op, ": ", got));
  c.expect(failure.status.code() == want_code, absl::StrCat("wrong status code: ", got));
  c.expect(absl::StrContains(failure.status.message(), want_text), absl::StrCat("no '", want_text, "' in: ", got));
  if (want_op >= 0) {
    c.expect(absl::StartsWith(failure.status.message(), kOpNames[want_op]), absl::StrCat("op not named: ", got));
  }
  c.expect(failure.elapsed <= timeout + kSlack,
           absl::StrCat("took ", absl::FormatDuration(failure.elapsed), " (timeout ", absl::FormatDuration(timeout),
                        "): ", got));
}

// After a failure every call fails at once with the first error.
void check_broken(ProcessGroup& pg, const absl::Status& first, RankChecks& c) {
  const absl::Time start = absl::Now();
  const absl::Status again = pg.barrier();
  c.expect(absl::Now() - start < absl::Milliseconds(500), "a call on a broken group did not fail at once");
  c.expect(again.code() == first.code(), absl::StrCat("later call: ", again.ToString()));
  c.expect(absl::StrContains(again.message(), "failed earlier") && absl::StrContains(again.message(), first.message()),
           absl::StrCat("later call does not repeat the first error: ", again.ToString()));
}

class GlooFailureTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(scratch_.ok()); }
  std::string store_dir() const { return (scratch_.path() / "rdzv").string(); }
  std::string report_dir() const { return scratch_.path().string(); }

  test::ScratchDir scratch_;
};

TEST_F(GlooFailureTest, RankKilledBetweenCollectivesIsNamedByTheNextCollectiveOfEveryOtherRank) {
  constexpr int kWorld = 4;
  constexpr int kVictim = 2;
  constexpr int kStepsBeforeDeath = 3;
  const absl::Duration timeout = absl::Seconds(5);
  auto outcomes = test::run_ranks(
      kWorld,
      [&](int rank) {
        RankChecks c;
        auto group = test::join_group(store_dir(), rank, kWorld, timeout);
        if (!c.expect_ok(group.status(), "join")) return RankReport{c.text(), ""};
        for (int step = 0; step < 10; ++step) {
          if (rank == kVictim && step == kStepsBeforeDeath) ::raise(SIGKILL);
          StepResult result = run_step(**group);
          if (result.status.ok()) continue;
          c.expect(step == kStepsBeforeDeath, absl::StrCat("failed in step ", step));
          check_failure(result, 0, absl::StatusCode::kUnavailable, absl::StrCat("lost rank ", kVictim), timeout, c);
          check_broken(**group, result.status, c);
          return RankReport{c.text(), result.status.ToString()};
        }
        c.complain("no collective failed after the victim died");
        return RankReport{c.text(), ""};
      },
      report_dir());

  for (const auto& o : outcomes) {
    if (o.rank == kVictim) {
      EXPECT_EQ(o.term_signal, SIGKILL) << o.problems();
    } else {
      EXPECT_EQ(o.problems(), "");
      std::cout << "rank " << o.rank << ": " << o.report.output << "\n";
    }
  }
}

TEST_F(GlooFailureTest, RankKilledWhileOthersWaitInsideACollective) {
  constexpr int kWorld = 3;
  constexpr int kVictim = 2;
  const absl::Duration timeout = absl::Seconds(5);
  auto outcomes = test::run_ranks(
      kWorld,
      [&](int rank) {
        RankChecks c;
        auto group = test::join_group(store_dir(), rank, kWorld, timeout);
        if (!c.expect_ok(group.status(), "join")) return RankReport{c.text(), ""};
        if (!c.expect_ok(run_step(**group).status, "step 0")) return RankReport{c.text(), ""};
        if (rank == kVictim) {
          // Dies while the others are already blocked in step 1, waiting for it.
          std::thread([] {
            absl::SleepFor(absl::Milliseconds(300));
            ::raise(SIGKILL);
          }).detach();
          absl::SleepFor(absl::Seconds(60));
        }
        StepResult result = run_step(**group);
        if (!c.expect(!result.status.ok(), "step 1 succeeded without the victim")) return RankReport{c.text(), ""};
        check_failure(result, 0, absl::StatusCode::kUnavailable, absl::StrCat("lost rank ", kVictim), timeout, c);
        check_broken(**group, result.status, c);
        return RankReport{c.text(), result.status.ToString()};
      },
      report_dir());

  for (const auto& o : outcomes) {
    if (o.rank == kVictim) {
      EXPECT_EQ(o.term_signal, SIGKILL) << o.problems();
    } else {
      EXPECT_EQ(o.problems(), "");
      std::cout << "rank " << o.rank << ": " << o.report.output << "\n";
    }
  }
}

TEST_F(GlooFailureTest, SilentRankFailsTheCollectiveAtTheTimeoutNamingIt) {
  constexpr int kWorld = 3;
  constexpr int kSilent = 1;
  const absl::Duration timeout = absl::Seconds(2);
  test::RunOptions run;
  run.left_behind = {kSilent};
  auto outcomes = test::run_ranks(
      kWorld,
      [&](int rank) {
        RankChecks c;
        auto group = test::join_group(store_dir(), rank, kWorld, timeout);
        if (!c.expect_ok(group.status(), "join")) return RankReport{c.text(), ""};
        if (!c.expect_ok(run_step(**group).status, "step 0")) return RankReport{c.text(), ""};
        if (rank == kSilent) ::raise(SIGSTOP);  // alive, connections open, never answers
        StepResult result = run_step(**group);
        if (!c.expect(!result.status.ok(), "step 1 succeeded without the silent rank")) return RankReport{c.text(), ""};
        check_failure(result, 0, absl::StatusCode::kDeadlineExceeded, absl::StrCat("rank ", kSilent, " did not answer"),
                      timeout, c);
        check_broken(**group, result.status, c);
        return RankReport{c.text(), result.status.ToString()};
      },
      report_dir(), run);

  for (const auto& o : outcomes) {
    if (o.rank == kSilent) continue;
    EXPECT_EQ(o.problems(), "");
    std::cout << "rank " << o.rank << ": " << o.report.output << "\n";
  }
}

// The trainer shortens the group's timeout once it knows a step's pace
// (train/collective_timeout.h): the next collective waits the new one, not the old.
TEST_F(GlooFailureTest, ATimeoutSetAfterJoiningBoundsTheNextCollective) {
  constexpr int kWorld = 2;
  constexpr int kSilent = 1;
  const absl::Duration joined_with = absl::Seconds(120);
  const absl::Duration shortened = absl::Seconds(1);
  test::RunOptions run;
  run.left_behind = {kSilent};
  auto outcomes = test::run_ranks(
      kWorld,
      [&](int rank) {
        RankChecks c;
        auto group = test::join_group(store_dir(), rank, kWorld, joined_with);
        if (!c.expect_ok(group.status(), "join")) return RankReport{c.text(), ""};
        if (!c.expect_ok(run_step(**group).status, "step 0")) return RankReport{c.text(), ""};
        if (rank == kSilent) ::raise(SIGSTOP);
        (*group)->set_timeout(shortened);
        c.expect((*group)->timeout() == shortened, "timeout() does not return what was set");
        StepResult result = run_step(**group);
        if (!c.expect(!result.status.ok(), "step 1 succeeded without the silent rank")) return RankReport{c.text(), ""};
        check_failure(result, 0, absl::StatusCode::kDeadlineExceeded,
                      absl::StrCat("rank ", kSilent, " did not answer within 1s"), shortened, c);
        return RankReport{c.text(), result.status.ToString()};
      },
      report_dir(), run);

  for (const auto& o : outcomes) {
    if (o.rank == kSilent) continue;
    EXPECT_EQ(o.problems(), "");
  }
}

TEST_F(GlooFailureTest, RankThatNeverJoinsFailsTheRendezvousAtTheTimeoutNamingIt) {
  constexpr int kWorld = 3;
  constexpr int kAbsent = 2;
  const absl::Duration timeout = absl::Seconds(1);
  auto outcomes = test::run_ranks(
      kWorld,
      [&](int rank) {
        RankChecks c;
        if (rank == kAbsent) return RankReport{};
        const absl::Time start = absl::Now();
        auto group = test::join_group(store_dir(), rank, kWorld, timeout);
        const absl::Duration elapsed = absl::Now() - start;
        const std::string got = group.status().ToString();
        c.expect(group.status().code() == absl::StatusCode::kDeadlineExceeded, absl::StrCat("join: ", got));
        c.expect(absl::StrContains(group.status().message(), absl::StrCat("rank ", kAbsent, " did not join")),
                 absl::StrCat("absent rank not named: ", got));
        c.expect(absl::StrContains(group.status().message(), "gloo rendezvous") &&
                     absl::StrContains(group.status().message(), store_dir()),
                 absl::StrCat("does not say where: ", got));
        c.expect(elapsed <= timeout + kSlack, absl::StrCat("took ", absl::FormatDuration(elapsed)));
        return RankReport{c.text(), got};
      },
      report_dir());

  for (const auto& o : outcomes) {
    EXPECT_EQ(o.problems(), "");
    if (o.rank != kAbsent) std::cout << "rank " << o.rank << ": " << o.report.output << "\n";
  }
}

TEST(GlooProcessGroupTest, RejectsBadArgumentsWithoutCommunicating) {
  test::ScratchDir scratch;
  ASSERT_TRUE(scratch.ok());
  auto store = FileStore::open(scratch.path());
  ASSERT_TRUE(store.ok());
  ProcessGroupOptions options;
  EXPECT_EQ(make_gloo_process_group(**store, 2, 2, options).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(make_gloo_process_group(**store, 0, 0, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.timeout = absl::ZeroDuration();
  EXPECT_EQ(make_gloo_process_group(**store, 0, 1, options).status().code(), absl::StatusCode::kInvalidArgument);

  // A group of one needs no peers (and no store traffic).
  options.timeout = absl::Seconds(1);
  auto group = make_gloo_process_group(**store, 0, 1, options);
  ASSERT_TRUE(group.ok()) << group.status();
  ProcessGroup& pg = **group;
  float x = 1.0f;
  EXPECT_EQ(pg.broadcast(&x, sizeof(x), 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pg.all_reduce(&x, -1, ReduceOp::kSum).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pg.all_gather(nullptr, &x, sizeof(x)).code(), absl::StatusCode::kInvalidArgument);
  // Bad arguments do not break the group.
  EXPECT_TRUE(pg.all_reduce(&x, 1, ReduceOp::kSum).ok());
  EXPECT_EQ(x, 1.0f);
  EXPECT_STREQ(reduce_op_name(ReduceOp::kSum), "sum");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMax), "max");
}

}  // namespace
}  // namespace fp8::engine::collectives
