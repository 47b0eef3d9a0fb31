#include "server/scheduler/liveness.h"

#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "fp8/v1/job.pb.h"

namespace fp8::scheduler {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using WorkerIds = std::vector<std::string>;

const LivenessClock::time_point kT0 = LivenessClock::time_point{} + seconds(1000);

TEST(LostWorkers, BoundaryIsStrictlyMoreThanLostAfter) {
  const std::vector<WorkerHeartbeat> hb = {
      {"exact", kT0 - seconds(10)},                       // silent exactly 10s: alive
      {"over", kT0 - seconds(10) - milliseconds(1)},      // 1ms more: lost
      {"under", kT0 - seconds(10) + milliseconds(1)},     // 1ms less: alive
      {"fresh", kT0},                                     // just now: alive
      {"future", kT0 + seconds(5)},                       // stamped after now: alive
      {"ancient", kT0 - seconds(900)}};
  EXPECT_EQ(lost_workers(hb, kT0, seconds(10)), (WorkerIds{"ancient", "over"}));
}

TEST(LostWorkers, EmptyAndAllAlive) {
  EXPECT_TRUE(lost_workers({}, kT0, seconds(10)).empty());
  const std::vector<WorkerHeartbeat> hb = {{"a", kT0 - seconds(1)}, {"b", kT0}};
  EXPECT_TRUE(lost_workers(hb, kT0, seconds(10)).empty());
}

TEST(LostWorkers, SortedByIdAndEachOnce) {
  const std::vector<WorkerHeartbeat> hb = {{"c", kT0 - seconds(60)},
                                           {"a", kT0 - seconds(60)},
                                           {"b", kT0 - seconds(60)},
                                           {"a", kT0 - seconds(70)}};
  EXPECT_EQ(lost_workers(hb, kT0, seconds(10)), (WorkerIds{"a", "b", "c"}));
}

TEST(LostWorkers, LatestHeartbeatOfADuplicateWins) {
  const std::vector<WorkerHeartbeat> hb = {{"a", kT0 - seconds(60)}, {"a", kT0}};
  EXPECT_TRUE(lost_workers(hb, kT0, seconds(10)).empty());
}

TEST(LostWorkers, ZeroWindowLosesAnythingOlderThanNow) {
  const std::vector<WorkerHeartbeat> hb = {{"now", kT0}, {"old", kT0 - milliseconds(1)}};
  EXPECT_EQ(lost_workers(hb, kT0, LivenessClock::duration::zero()), (WorkerIds{"old"}));
}

TEST(DescribeFailure, SaysWhatAndWhere) {
  EXPECT_EQ(describe_failure(WorkerLost{"w2"}), "worker 'w2' lost (no heartbeat)");
  EXPECT_EQ(describe_failure(RankExited{1, "w2", 3}), "rank 1 on worker 'w2' exited with code 3");
  EXPECT_EQ(describe_failure(RankExited{0, "w1", -9}), "rank 0 on worker 'w1' killed by signal 9");
}

// restarts.on's default.
constexpr FailureClass kDefaultOn[] = {FailureClass::kWorkerLost, FailureClass::kPeerLost, FailureClass::kSignal,
                                       FailureClass::kHung, FailureClass::kUnknown};

TEST(DecideAfterFailure, RestartsWhileBelowMaxRestarts) {
  const AttemptFailure lost = WorkerLost{"w2"};
  const AttemptDecision first = decide_after_failure(describe_failure(lost), classify_failure(lost), 0, 2, kDefaultOn);
  ASSERT_TRUE(std::holds_alternative<Restart>(first));
  EXPECT_EQ(std::get<Restart>(first).restart_number, 1);
  EXPECT_EQ(std::get<Restart>(first).reason, "worker 'w2' lost (no heartbeat)");

  const AttemptDecision last = decide_after_failure(describe_failure(lost), classify_failure(lost), 1, 2, kDefaultOn);
  ASSERT_TRUE(std::holds_alternative<Restart>(last));
  EXPECT_EQ(std::get<Restart>(last).restart_number, 2);
}

TEST(DecideAfterFailure, FailsAtTheBoundary) {
  const AttemptFailure exited = RankExited{1, "w2", 1};
  const AttemptDecision d = decide_after_failure(describe_failure(exited), classify_failure(exited), 2, 2, kDefaultOn);
  ASSERT_TRUE(std::holds_alternative<Fail>(d));
  EXPECT_EQ(std::get<Fail>(d).reason, "rank 1 on worker 'w2' exited with code 1 (all 2 restarts used)");
  EXPECT_TRUE(std::holds_alternative<Fail>(decide_after_failure("x", FailureClass::kUnknown, 5, 2, kDefaultOn)));
}

TEST(DecideAfterFailure, ZeroOrNegativeMaxRestartsFailsAtOnce) {
  const AttemptFailure lost = WorkerLost{"w1"};
  EXPECT_TRUE(std::holds_alternative<Fail>(decide_after_failure("lost", FailureClass::kWorkerLost, 0, 0, kDefaultOn)));
  const AttemptDecision d = decide_after_failure(describe_failure(lost), FailureClass::kWorkerLost, 0, -1, kDefaultOn);
  ASSERT_TRUE(std::holds_alternative<Fail>(d));
  EXPECT_EQ(std::get<Fail>(d).reason, "worker 'w1' lost (no heartbeat)");
}

// A failure that repeats as is (a configuration error, a divergence) fails the job at
// once, restarts left or not, unless restarts.on lists it.
TEST(DecideAfterFailure, AClassNotInRestartsOnFailsAtOnce) {
  const AttemptFailure diverged = RankExited{0, "w1", 3};
  ASSERT_EQ(classify_failure(diverged), FailureClass::kDivergence);
  const AttemptDecision d = decide_after_failure(describe_failure(diverged), FailureClass::kDivergence, 0, 5, kDefaultOn);
  ASSERT_TRUE(std::holds_alternative<Fail>(d));
  EXPECT_EQ(std::get<Fail>(d).reason,
            "rank 0 on worker 'w1' exited with code 3; not restarted: a divergence failure, not in restarts.on");
  const FailureClass also[] = {FailureClass::kDivergence};
  EXPECT_TRUE(std::holds_alternative<Restart>(decide_after_failure("x", FailureClass::kDivergence, 0, 5, also)));
  EXPECT_TRUE(std::holds_alternative<Fail>(decide_after_failure("x", FailureClass::kWorkerLost, 0, 5, also)));
}

TEST(ClassifyFailure, ExitCodesSignalsLostWorkersAndHangs) {
  EXPECT_EQ(classify_exit_code(2), FailureClass::kConfiguration);
  EXPECT_EQ(classify_exit_code(3), FailureClass::kDivergence);
  EXPECT_EQ(classify_exit_code(4), FailureClass::kOutOfMemory);
  EXPECT_EQ(classify_exit_code(5), FailureClass::kPeerLost);
  EXPECT_EQ(classify_exit_code(130), FailureClass::kSignal);
  EXPECT_EQ(classify_exit_code(143), FailureClass::kSignal);
  EXPECT_EQ(classify_exit_code(-9), FailureClass::kSignal);
  EXPECT_EQ(classify_exit_code(1), FailureClass::kUnknown);
  EXPECT_EQ(classify_exit_code(77), FailureClass::kUnknown);
  EXPECT_EQ(classify_failure(WorkerLost{"w"}), FailureClass::kWorkerLost);
  EXPECT_EQ(classify_failure(RankHung{0, "w", std::chrono::seconds(5)}), FailureClass::kHung);
  EXPECT_STREQ(failure_class_name(FailureClass::kOutOfMemory), "out_of_memory");
}

// job.proto's RestartPolicy.FailureClass names every class as the scheduler does, in
// capitals (the coordinator converts by name).
TEST(ClassifyFailure, EveryClassIsARestartPolicyValueOfTheSameName) {
  for (FailureClass c : {FailureClass::kWorkerLost, FailureClass::kPeerLost, FailureClass::kSignal, FailureClass::kHung,
                         FailureClass::kConfiguration, FailureClass::kDivergence, FailureClass::kOutOfMemory,
                         FailureClass::kUnknown}) {
    v1::RestartPolicy::FailureClass parsed = v1::RestartPolicy::FAILURE_CLASS_UNSPECIFIED;
    EXPECT_TRUE(v1::RestartPolicy::FailureClass_Parse(absl::AsciiStrToUpper(failure_class_name(c)), &parsed))
        << failure_class_name(c);
  }
}

TEST(RestartBackoff, DoublesForEachRestartUpToAnHour) {
  EXPECT_EQ(restart_backoff(10, 1), std::chrono::seconds(10));
  EXPECT_EQ(restart_backoff(10, 2), std::chrono::seconds(20));
  EXPECT_EQ(restart_backoff(10, 4), std::chrono::seconds(80));
  EXPECT_EQ(restart_backoff(10, 100), std::chrono::seconds(3600));
  EXPECT_EQ(restart_backoff(0, 7), std::chrono::seconds(0));
}

}  // namespace
}  // namespace fp8::scheduler
